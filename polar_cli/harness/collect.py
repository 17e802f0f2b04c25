"""After a run: the patch (git diff of the workdir against the base commit, new files included) and the artifacts.

Both are computed inside the container by fixed shell scripts that take every variable part as a positional argument,
and written to files that are then copied out, so stderr chatter never mixes into a patch.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from pathlib import Path

from polar_cli.errors import RuntimeFailure
from polar_cli.runtime.base import Container

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

# $1 output tar, then absolute paths; the ones that exist are archived relative to /.
ARTIFACTS_SCRIPT = """
out=$1; shift
n=$#
for p in "$@"; do
  if [ -e "$p" ]; then set -- "$@" "${p#/}"; fi
done
shift "$n"
[ "$#" -gt 0 ] || exit 0
tar -C / -cf "$out" -- "$@"
"""

PATCH_FILE = "/tmp/.polar-exec/patch.diff"
ARTIFACTS_FILE = "/tmp/.polar-exec/artifacts.tar"


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


def artifacts_argv(paths: Sequence[str]) -> list[str]:
    return ["/bin/sh", "-c", ARTIFACTS_SCRIPT, "polar-artifacts", ARTIFACTS_FILE, *paths]


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
        text = result.output.decode(errors="replace")
        raise RuntimeFailure(f"collecting the patch failed (exit {result.exit_code}): {text[-500:]}")
    # patches travel as JSON text (SWE-bench's model_patch); a non-UTF-8 hunk cannot be represented exactly there
    return container.get_file(PATCH_FILE).decode("utf-8", errors="replace")


def collect_artifacts(container: Container, paths: Sequence[str], dest: Path, timeout: float = 120.0) -> list[str]:
    """Copy the harness's logs and transcripts into dest (keeping their absolute layout); returns what was found."""
    if not paths:
        return []
    result = container.exec(artifacts_argv(paths), timeout=timeout)
    if result.exit_code != 0:
        return []
    try:
        data = container.get_file(ARTIFACTS_FILE)
    except FileNotFoundError:
        return []  # none of the paths existed
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        # the "data" filter refuses absolute paths, links out of dest and device files
        tar.extractall(dest, filter="data")
    return [p for p in paths if (dest / p.lstrip("/")).exists()]
