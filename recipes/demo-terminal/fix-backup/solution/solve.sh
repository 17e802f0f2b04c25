#!/bin/bash
set -euo pipefail
cat > /app/backup.sh <<'SCRIPT'
#!/bin/bash
# Archive every .txt file under the directory $1 into the gzipped tarball $2.
set -euo pipefail
src=$1
out=$2
find "$src" -type f -name '*.txt' -print0 | tar -czf "$out" --null -T -
SCRIPT
