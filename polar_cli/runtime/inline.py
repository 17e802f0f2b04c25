"""Files written by the exec that needs them: one round trip to the engine instead of two.

An archive copy into a container (`Container.put_files`) costs about as much as a short exec (40-90 ms on the 2-core
box), so a caller that writes files and then runs a command in one container can have the command's own exec write
them first (`exec_with_files`), when they are text that fits in argv. Files that do not fit (binary, a NUL, past
`FILE_MAX` or `FILES_MAX`) are copied in first, as before; the command runs the same either way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from polar_cli.errors import RuntimeFailure
from polar_cli.runtime.base import Container, ExecResult

# what the write script prints, then exits with WRITE_FAILED_EXIT, when a file cannot be written
WRITE_FAILED = "polar: cannot write"
WRITE_FAILED_EXIT = 125
# $1 $2: a path and its content, repeated up to "--"; then the command. `printf %s` writes its argument as it is.
# A file it cannot write ends it before the command, with WRITE_FAILED, the path and the shell's own words, alone.
WRITE_SCRIPT = f"""
while [ "$1" != -- ]; do
  why=$( {{ mkdir -p -- "${{1%/*}}" && printf %s "$2" >"$1"; }} 2>&1 ) || {{
    echo "{WRITE_FAILED} $1: $why"; exit {WRITE_FAILED_EXIT}
  }}
  shift 2
done
shift
exec "$@"
"""
# bytes of one file's content in argv: Linux takes at most 128 KiB per argument
FILE_MAX = 96 * 1024
# bytes of all of them: well under the 2 MiB that argv and the environment share
FILES_MAX = 384 * 1024


def exec_with_files(
    container: Container,
    files: Mapping[str, bytes],
    argv: Sequence[str],
    *,
    timeout: float,
    output_cap: int = 8 * 1024 * 1024,
) -> ExecResult:
    """``files`` (absolute paths) written, then ``argv`` run: in one exec when they fit in its argv, else copied in
    first. A file that cannot be written raises a `RuntimeFailure` before ``argv`` runs, as `put_files` would."""
    texts = _argv_texts(files)
    if texts is None:
        container.put_files(files)
        return container.exec(argv, timeout=timeout, output_cap=output_cap)
    if not texts:
        return container.exec(argv, timeout=timeout, output_cap=output_cap)
    pairs = [part for path, text in texts.items() for part in (path, text)]
    wrapped = ["/bin/sh", "-c", WRITE_SCRIPT, "polar-write", *pairs, "--", *argv]
    result = container.exec(wrapped, timeout=timeout, output_cap=output_cap)
    if result.exit_code == WRITE_FAILED_EXIT and result.output.startswith(WRITE_FAILED.encode()):
        said = result.output.decode(errors="replace").strip()
        raise RuntimeFailure(f"writing {len(files)} file(s) into the container failed: {said}")
    return result


def _argv_texts(files: Mapping[str, bytes]) -> dict[str, str] | None:
    """``files`` as argv can carry them unchanged (UTF-8 text without NUL, within the limits); None when they
    cannot be."""
    texts: dict[str, str] = {}
    for path, data in files.items():
        if not path.startswith("/"):
            raise ValueError(f"exec_with_files: {path!r} is not an absolute path")
        if len(data) > FILE_MAX or b"\0" in data:
            return None
        try:
            texts[path] = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if sum(len(data) for data in files.values()) > FILES_MAX:
        return None
    return texts
