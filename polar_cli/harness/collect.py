"""After a run: the patch (git diff of the workdir against the base commit, new files included) and the artifacts.

Both are computed inside the container by fixed shell scripts that take every variable part as a positional argument,
and written to files, so stderr chatter never mixes into a patch. POSTRUN takes both in one exec (`COLLECT_SCRIPT`:
the artifacts' tar and the patch, in one tar), which prints that tar when it is small (`INLINE_MAX`), so that most
sessions need no copy out (a round trip to the engine, about 50 ms); a larger one is copied out. `collect_patch` takes
the patch alone.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from polar_cli.errors import RuntimeFailure
from polar_cli.runtime.base import Container, ExecResult

GIT = "git -c safe.directory=* -c core.quotepath=false"

# $1 workdir. Make it a repository with one commit when it is not one (an ad-hoc image), print the base commit.
BASE_SCRIPT = f"""
mkdir -p "$1" && cd "$1" || exit 3
if ! {GIT} rev-parse --verify -q HEAD >/dev/null 2>&1; then
  {GIT} init -q . && {GIT} add -A . &&
  {GIT} -c user.name=polar -c user.email=polar@localhost commit -q --allow-empty --no-verify -m polar-base || exit 4
fi
{GIT} rev-parse HEAD
"""

# the output tar's members (`COLLECT_SCRIPT`)
ARTIFACTS_MEMBER = "artifacts.tar"
PATCH_MEMBER = "patch.diff"

# $1 workdir, $2 base commit, $3 output file, then exclude pathspecs. A scratch index keeps the repo's own untouched.
PATCH_SCRIPT = f"""
cd "$1" || exit 3
base=$2; out=$3; shift 3
GIT_INDEX_FILE=$(mktemp) || exit 4
export GIT_INDEX_FILE
cp "$({GIT} rev-parse --git-dir)/index" "$GIT_INDEX_FILE" 2>/dev/null || rm -f "$GIT_INDEX_FILE"
{GIT} add -A -- . "$@" || exit 5
{GIT} diff --cached --binary --no-color --no-ext-diff "$base" -- >"$out"
status=$?
rm -f "$GIT_INDEX_FILE"
exit $status
"""

# $1 output tar, $2 the most bytes of it to print, $3 how many artifact paths follow, those absolute paths, then
# PATCH_SCRIPT's workdir, base commit and exclude pathspecs. The output tar holds `ARTIFACTS_MEMBER` (the artifact paths
# that exist, archived relative to /; left out when there are none or archiving them failed, whose output is dropped)
# and `PATCH_MEMBER` (the patch, as PATCH_SCRIPT takes it, in a subshell: its exit status is the script's). What the
# steps say goes to a log beside the tar; at the end the script prints the tar when the patch was taken and the tar
# has at most $2 bytes (nothing, when it has more: the caller copies it out), or the log when it failed.
COLLECT_SCRIPT = f"""
out=$1; inline=$2; n=$3; shift 3
rm -f "$out" "$out.log"
(
dir=$(mktemp -d) || exit 6
artifacts() {{
  k=$#; i=0
  for p in "$@"; do
    i=$((i + 1))
    if [ "$i" -le "$n" ] && [ -e "$p" ]; then set -- "$@" "${{p#/}}"; fi
  done
  shift "$k"
  [ "$#" -gt 0 ] || return 0
  tar -C / -cf "$dir/{ARTIFACTS_MEMBER}" -- "$@" >/dev/null 2>&1 || rm -f "$dir/{ARTIFACTS_MEMBER}"
}}
artifacts "$@"
shift "$n"
workdir=$1; base=$2; shift 2
(
set -- "$workdir" "$base" "$dir/{PATCH_MEMBER}" "$@"
{PATCH_SCRIPT}
)
status=$?
tar -C "$dir" -cf "$out" . || status=7
rm -rf "$dir"
exit "$status"
) >"$out.log" 2>&1
status=$?
if [ "$status" != 0 ]; then cat "$out.log"
elif [ $(wc -c <"$out") -le "$inline" ]; then cat "$out"
fi
rm -f "$out.log"
exit "$status"
"""

PATCH_FILE = "/tmp/.polar-exec/patch.diff"
COLLECT_FILE = "/tmp/.polar-exec/collect.tar"
# the largest collect tar printed by the exec instead of copied out: under the smallest output limit a session
# container can have (`runtime.output_limit_mb` >= 1), past which the exec would be killed
INLINE_MAX = 512 * 1024


def exclude_pathspecs(droppings: Sequence[str]) -> list[str]:
    return [f":(exclude){d}" for d in droppings]


def base_commit_argv(workdir: str) -> list[str]:
    return ["/bin/sh", "-c", BASE_SCRIPT, "polar-base", workdir]


def patch_argv(workdir: str, base_commit: str, droppings: Sequence[str]) -> list[str]:
    return [
        "/bin/sh",
        "-c",
        PATCH_SCRIPT,
        "polar-patch",
        workdir,
        base_commit,
        PATCH_FILE,
        *exclude_pathspecs(droppings),
    ]


def collect_argv(workdir: str, base_commit: str, droppings: Sequence[str], artifacts: Sequence[str]) -> list[str]:
    return [
        "/bin/sh",
        "-c",
        COLLECT_SCRIPT,
        "polar-collect",
        COLLECT_FILE,
        str(INLINE_MAX),
        str(len(artifacts)),
        *artifacts,
        workdir,
        base_commit,
        *exclude_pathspecs(droppings),
    ]


def prepare_base(container: Container, workdir: str, timeout: float = 120.0) -> str:
    """The commit the patch is taken against: HEAD of the workdir, created when the workdir is not a repository."""
    result = container.exec(base_commit_argv(workdir), timeout=timeout)
    text = result.output.decode(errors="replace").strip()
    if result.exit_code != 0 or not text:
        raise RuntimeFailure(f"preparing git in {workdir} failed (exit {result.exit_code}): {text[-500:]}")
    return text.splitlines()[-1]


def collect_patch(
    container: Container, workdir: str, base_commit: str, droppings: Sequence[str], timeout: float = 300.0
) -> str:
    """The agent's changes as a git patch (binary-safe, new files included, the harness's droppings left out)."""
    result = container.exec(patch_argv(workdir, base_commit, droppings), timeout=timeout)
    if result.exit_code != 0:
        raise RuntimeFailure(_patch_failed(result))
    return _patch_text(container.get_file(PATCH_FILE))


@dataclass(frozen=True, slots=True)
class Outputs:
    """What `collect_outputs` took: the patch (None when it could not be taken, and ``error`` says why) and the
    artifact paths found."""

    patch: str | None
    artifacts: list[str]
    error: str | None = None


def collect_outputs(
    container: Container,
    workdir: str,
    base_commit: str,
    droppings: Sequence[str],
    artifacts: Sequence[str] = (),
    dest: Path | None = None,
    timeout: float = 420.0,
) -> Outputs:
    """`collect_patch` and the harness's logs and transcripts copied into ``dest`` (keeping their absolute layout; none
    when ``dest`` is None), in one exec, and a copy out when the exec did not print them. The artifacts come back even
    when the patch fails."""
    paths = list(artifacts) if dest is not None else []
    result = container.exec(collect_argv(workdir, base_commit, droppings, paths), timeout=timeout)
    members = _printed_members(result)
    if members is None:
        try:
            members = _tar_members(container.get_file(COLLECT_FILE))
        except FileNotFoundError:
            members = {}  # the script failed before it wrote anything: its exit status says why
    found = _extract_artifacts(members.get(ARTIFACTS_MEMBER), paths, dest) if dest is not None else []
    if result.exit_code != 0:
        return Outputs(None, found, _patch_failed(result))
    patch = members.get(PATCH_MEMBER)
    if patch is None:
        return Outputs(None, found, "collecting the patch failed: the collect script wrote no patch")
    return Outputs(_patch_text(patch), found)


def _patch_failed(result: ExecResult) -> str:
    text = result.output.decode(errors="replace")
    return f"collecting the patch failed (exit {result.exit_code}): {text[-500:]}"


def _patch_text(data: bytes) -> str:
    # patches travel as JSON text (SWE-bench's model_patch); a non-UTF-8 hunk cannot be represented exactly there
    return data.decode("utf-8", errors="replace")


def _printed_members(result: ExecResult) -> dict[str, bytes] | None:
    """The members of the tar the collect script printed; None when it printed none (it failed, or the tar was over
    `INLINE_MAX`) or what came is not a whole tar: the tar is then copied out of the container."""
    if result.exit_code != 0 or not result.output or result.truncated:
        return None
    try:
        return _tar_members(result.output)
    except tarfile.TarError:
        return None


def _tar_members(data: bytes) -> dict[str, bytes]:
    """The regular files of a tar by their base name."""
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar.getmembers():
            fh = tar.extractfile(member) if member.isfile() else None
            if fh is not None:
                members[PurePosixPath(member.name).name] = fh.read()
    return members


def _extract_artifacts(data: bytes | None, paths: Sequence[str], dest: Path) -> list[str]:
    """Unpack the artifacts' tar into dest; returns the paths that were found."""
    if data is None:
        return []  # none of the paths existed, or archiving them failed
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        # the "data" filter refuses absolute paths, links out of dest and device files
        tar.extractall(dest, filter="data")
    return [p for p in paths if (dest / p.lstrip("/")).exists()]
