#!/bin/bash
# Run /app/backup.sh on a tree with spaces in its names; reward 1 when the archive holds exactly its .txt files.
mkdir -p /logs/verifier
work=$(mktemp -d)
mkdir -p "$work/src/sub dir"
echo one > "$work/src/plain.txt"
echo two > "$work/src/with space.txt"
echo three > "$work/src/sub dir/deep file.txt"
echo skip > "$work/src/notes.log"
if bash /app/backup.sh "$work/src" "$work/out.tar.gz" && [ -f "$work/out.tar.gz" ]; then
  listed=$(tar -tzf "$work/out.tar.gz" | sed 's#.*/src/##' | sort)
else
  listed="(backup.sh failed or wrote no archive)"
fi
expected=$'plain.txt\nsub dir/deep file.txt\nwith space.txt'
echo "archive holds:"
echo "$listed"
if [ "$listed" = "$expected" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
