"""At INIT, make the session's repository hold nothing from after its base commit, whatever the image holds.

Why: agents have read the gold fix out of the instance image's own repository (SWE-bench issue 465,
mini-swe-agent issue 787): the images are clones reset to the base commit, so ``git log --all``, the tags, the
reflog and the pack still hold every later commit. `STRIP_SCRIPT` ($1 workdir, $2 base commit), in order:

1. HEAD becomes a branch at the base commit (its own branch name when it is on one, else ``main``); the index and
   the working tree are not touched, so uncommitted changes in the image stay.
2. Every other ref goes in one `git update-ref --stdin` transaction (no symref is followed): branches, tags,
   remote-tracking refs, ``refs/stash``, notes, replace refs, ``refs/original``. Tags whose commit is the base or an
   ancestor of it stay (``git describe``, setuptools-scm): history before the base is fine.
3. Every remote, every reflog, the pseudo refs (ORIG_HEAD, FETCH_HEAD, MERGE_HEAD, ...), an operation in progress
   (rebase, cherry-pick, bisect), rerere's cache, COMMIT_EDITMSG, other worktrees' HEADs, and the caches that name
   objects (commit-graph, multi-pack-index, ``info/refs``, ``objects/info/packs``) go.
4. Objects: cheap first. When step 2 dropped a ref, a pseudo ref existed, or the store borrows from alternates or
   holds ``.keep`` packs, something unreachable is all but certain, so the repository is repacked at once. Otherwise
   the objects in the store are counted against the ones reachable from HEAD and the index (one `rev-list
   --objects` walk), and only a difference repacks. Repacking is `git repack -a -d` (every reachable object in one
   pack, reusing deltas, the old packs deleted: unreachable packed objects are dropped, not loosened as `gc` would),
   then `git prune --expire=now` for loose ones, never a full `gc`. Objects borrowed from alternates are copied in
   and the alternates file removed.

The script prints ``key=value`` lines (`Stripped`). Not handled: submodules' own repositories (``.git/modules``),
grafts and shallow files (history before the base, if anything), a reftable ref store's reflogs beyond `git reflog
expire`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from polar_cli.errors import RuntimeFailure
from polar_cli.harness.collect import GIT
from polar_cli.runtime.base import Container

# POSIX sh (dash, busybox): instance images differ
STRIP_SCRIPT = f"""
cd "$1" || exit 3
g() {{ {GIT} "$@"; }}
base=$(g rev-parse --verify -q "$2^{{commit}}") || {{ echo "polar: base commit $2 is not in $1"; exit 4; }}
gd=$(cd "$(g rev-parse --git-dir)" && pwd -P) || exit 5
common=$(cd "$(g rev-parse --git-common-dir)" && pwd -P) || exit 5
tmp=$(mktemp -d) || exit 6
trap 'rm -rf "$tmp"' EXIT
branch=$(g symbolic-ref -q HEAD) || branch=refs/heads/main
case $branch in refs/heads/?*) ;; *) branch=refs/heads/main ;; esac
logs() {{
  find "$common/logs" -type f -exec cat {{}} +
  [ "$gd" = "$common" ] || find "$gd/logs" -type f -exec cat {{}} +
}}
reflog=$(($(logs 2>/dev/null | wc -l)))
g for-each-ref --format='%(refname)' >"$tmp/all" || exit 7
{{ echo "$branch"; g for-each-ref --format='%(refname)' --merged "$base" refs/tags; }} >"$tmp/keep" || exit 7
grep -vxF -f "$tmp/keep" "$tmp/all" >"$tmp/drop"
refs=$(($(wc -l <"$tmp/drop")))
if [ "$refs" -gt 0 ]; then
  sed 's/^/delete /' "$tmp/drop" | g update-ref --no-deref --stdin || exit 8
fi
g update-ref --no-deref "$branch" "$base" || exit 9
g symbolic-ref HEAD "$branch" || exit 9
remotes=0
for r in $(g remote); do g remote remove "$r" >/dev/null 2>&1; remotes=$((remotes + 1)); done
need=0
[ "$refs" -gt 0 ] && need=1
for f in ORIG_HEAD FETCH_HEAD MERGE_HEAD CHERRY_PICK_HEAD REVERT_HEAD BISECT_HEAD AUTO_MERGE REBASE_HEAD; do
  if [ -e "$gd/$f" ]; then need=1; rm -f "$gd/$f"; fi
done
rm -rf "$gd/rebase-merge" "$gd/rebase-apply" "$gd/sequencer" "$gd"/BISECT_* "$gd"/MERGE_* "$gd/SQUASH_MSG" \\
  "$gd/COMMIT_EDITMSG" "$common/rr-cache" "$common/info/refs" "$common/objects/info/packs" \\
  "$common/objects/info/commit-graph" "$common/objects/info/commit-graphs" "$common/objects/pack/multi-pack-index"
[ "$gd" = "$common" ] && rm -rf "$common/worktrees"
g reflog expire --expire=all --expire-unreachable=all --all >/dev/null 2>&1
rm -rf "$gd/logs" "$common/logs"
[ -s "$common/objects/info/alternates" ] && need=1
for k in "$common"/objects/pack/*.keep; do [ -e "$k" ] && need=1 && rm -f "$k"; done
count() {{ g count-objects -v | awk '/^count:/ {{ n += $2 }} /^in-pack:/ {{ n += $2 }} END {{ print n + 0 }}'; }}
before=$(count)
if [ "$need" = 0 ]; then
  reachable=$(($(g rev-list --objects --all --indexed-objects | wc -l)))
  [ "$reachable" -ne "$before" ] && need=1
fi
if [ "$need" = 1 ]; then
  g repack -a -d -q || exit 10
  rm -f "$common/objects/info/alternates"
  loose=$(g count-objects -v | awk '/^count:/ {{ print $2 }}')
  if [ "$loose" -gt 0 ]; then g prune --expire=now || exit 11; fi
fi
echo "refs=$refs"
echo "reflog=$reflog"
echo "remotes=$remotes"
echo "objects_before=$before"
echo "objects_after=$(count)"
echo "repacked=$need"
"""


@dataclass(frozen=True, slots=True)
class Stripped:
    """What INIT removed from the repository (`STRIP_SCRIPT`), and how long it took."""

    # refs deleted: branches, tags after the base, remote-tracking refs, stash, notes, replace refs
    refs: int = 0
    # reflog entries dropped (the stash's entries among them)
    reflog: int = 0
    remotes: int = 0
    # objects in the store (loose + packed, duplicates included) before and after
    objects_before: int = 0
    objects_after: int = 0
    repacked: bool = False
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def strip_argv(workdir: str, base_commit: str) -> list[str]:
    return ["/bin/sh", "-c", STRIP_SCRIPT, "polar-strip", workdir, base_commit]


def parse_stripped(output: str, seconds: float = 0.0) -> Stripped:
    """The script's ``key=value`` lines as a `Stripped` (other lines, git's chatter, are ignored)."""
    values: dict[str, int] = {}
    for line in output.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key in Stripped.__dataclass_fields__ and value.strip().isdigit():
            values[key] = int(value)
    return Stripped(
        refs=values.get("refs", 0),
        reflog=values.get("reflog", 0),
        remotes=values.get("remotes", 0),
        objects_before=values.get("objects_before", 0),
        objects_after=values.get("objects_after", 0),
        repacked=bool(values.get("repacked", 0)),
        seconds=round(seconds, 3),
    )


def strip_history(container: Container, workdir: str, base_commit: str, timeout: float = 600.0) -> Stripped:
    """Run `STRIP_SCRIPT` in the container; a failure (no such base commit, git refusing) is `RuntimeFailure`."""
    start = time.monotonic()
    result = container.exec(strip_argv(workdir, base_commit), timeout=timeout)
    text = result.output.decode(errors="replace")
    if result.timed_out or result.exit_code != 0:
        why = "timed out" if result.timed_out else f"exit {result.exit_code}"
        raise RuntimeFailure(f"stripping git history after {base_commit} in {workdir} failed ({why}): {text[-500:]}")
    return parse_stripped(text, time.monotonic() - start)
