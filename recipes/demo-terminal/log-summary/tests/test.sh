#!/bin/bash
# One named reward per line of /app/summary.txt (reward.json); ``reward`` is 1 when all three are right.
mkdir -p /logs/verifier
line() { grep -x "$1" /app/summary.txt >/dev/null 2>&1 && echo 1 || echo 0; }
requests=$(line 'requests 8')
errors=$(line 'errors 3')
top_ip=$(line 'top_ip 10.0.0.1')
lines=$(wc -l < /app/summary.txt 2>/dev/null || echo 0)
all=0
if [ "$requests$errors$top_ip" = 111 ] && [ "$lines" -eq 3 ]; then all=1; fi
echo "requests=$requests errors=$errors top_ip=$top_ip lines=$lines"
printf '{"reward": %d, "requests": %d, "errors": %d, "top_ip": %d}\n' "$all" "$requests" "$errors" "$top_ip" \
  > /logs/verifier/reward.json
