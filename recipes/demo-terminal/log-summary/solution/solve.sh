#!/bin/bash
set -euo pipefail
awk '{ n++; if ($9 ~ /^5/) e++; c[$1]++ }
     END { for (ip in c) if (c[ip] > best) { best = c[ip]; top = ip }
           printf "requests %d\nerrors %d\ntop_ip %s\n", n, e, top }' /app/access.log > /app/summary.txt
