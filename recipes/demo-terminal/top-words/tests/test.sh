#!/bin/bash
# The expected answer for /app/corpus.txt as shipped; reward 1 when /app/top-words.txt matches it exactly.
mkdir -p /logs/verifier
expected=$'9 the\n6 fox\n5 dog\n3 a\n3 and'
if [ -f /app/top-words.txt ] && [ "$(cat /app/top-words.txt)" = "$expected" ]; then
  echo "top-words.txt is right"
  echo 1 > /logs/verifier/reward.txt
else
  echo "top-words.txt is missing or wrong; expected:"
  echo "$expected"
  echo "got:"
  cat /app/top-words.txt 2>/dev/null
  echo 0 > /logs/verifier/reward.txt
fi
