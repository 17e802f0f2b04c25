#!/bin/sh
# Commit the repository in the current directory as a single commit with a fixed author, committer, date and
# message, so its hash (the instances' base_commit) is the same on every machine and in every image build.
# Used by the Dockerfile and by make_instances.py; prints the commit hash.
set -eu
name="$1"
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME="Polar Demo" GIT_AUTHOR_EMAIL="demo@polar.invalid" GIT_AUTHOR_DATE="2024-06-01T12:00:00+00:00"
export GIT_COMMITTER_NAME="$GIT_AUTHOR_NAME" GIT_COMMITTER_EMAIL="$GIT_AUTHOR_EMAIL" GIT_COMMITTER_DATE="$GIT_AUTHOR_DATE"
git init -q .
git symbolic-ref HEAD refs/heads/main
git add -A
git commit -q --no-verify -m "Import $name"
git rev-parse HEAD
