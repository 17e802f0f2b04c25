"""Pieces of `docker exec` that need no engine: the stream frame decoder, the output cap, the wrapper scripts.

Docker multiplexes a non-TTY exec's stdout and stderr on one connection as frames: an 8-byte header (stream byte, three
zero bytes, big-endian payload length) and the payload. `FrameDecoder` turns bytes into payloads (sans-IO, fed in any
chunking); `CappedBuffer` keeps the first N bytes and counts them all.

The wrapper (`WRAP_SCRIPT`) runs argv in a process group of its own and, once argv's process has exited (whatever
it left running in the background), kills that group, so the exec returns when the command does: a background child
holding the output stream would otherwise keep the exec open. It records the container's OOM-kill count before and
after a command that failed (`STATUS_SUFFIX` beside the pidfile), so a command the kernel killed at the memory
limit tells itself apart from one that exited or was killed otherwise (`oom_kills`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

HEADER = struct.Struct(">BxxxL")

# Runs argv in its own session so the whole tree can be killed by process group, records that group's id in $0, and
# feeds it stdin from a file ($1, /dev/null by default: a harness must never wait on a terminal that is not there).
# argv reaches `exec "$@"` as separate words: no quoting of caller data anywhere.
RUN_SCRIPT = 'echo $$ >"$0"; i=$1; shift; exec "$@" <"$i"'

# Where the wrapper writes "<OOM kills before> <after>" when the command exited non-zero: the pidfile plus this.
STATUS_SUFFIX = ".status"
# The exec's own process: a plain shell outside the command's group. It makes the pidfile's directory when it is not
# there (so an exec without stdin copies nothing into the container first: no archive round trip to the engine), runs
# RUN_SCRIPT under `setsid` (a child of a shell is no group leader, so setsid makes it one without forking, and the
# shell sees its real wait status: 137 for SIGKILL), then SIGKILLs what is left of the group, so background children
# (`sleep &`, which keep the exec's output stream open) end with the command. A child that left the group with its
# own session (`setsid cmd &`) is not found here; the container's removal ends it. The OOM-kill count is the
# container's cgroup's: `memory.events` (cgroup v2) or `memory.oom_control` (v1, kernel 4.13+); none readable: both
# counts empty.
WRAP_SCRIPT = (
    '[ -d "${0%/*}" ] || mkdir -p "${0%/*}"\n'
    "o() { for f in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do"
    ' [ -r "$f" ] && while read -r k v; do [ "$k" = oom_kill ] && echo "$v"; done <"$f"; done; }\n'
    "b=$(o)\n"
    "setsid -w /bin/sh -c '" + RUN_SCRIPT.replace("'", "'\\''") + '\' "$0" "$@"\n'
    "s=$?\n"
    'p=$(cat "$0" 2>/dev/null)\n'
    '[ -n "$p" ] && kill -KILL -"$p" 2>/dev/null\n'
    '[ "$s" = 0 ] || echo "$b $(o)" >"$0' + STATUS_SUFFIX + '"\n'
    'exit "$s"\n'
)

# Kills the recorded process group and every descendant still attached to it by parentage (a child that started its
# own session keeps its parent): stop them all first so none can fork away, then SIGKILL.
KILL_SCRIPT = r"""
p=$(cat "$0" 2>/dev/null) || exit 0
[ -n "$p" ] || exit 0
all=$p; todo=$p
while [ -n "$todo" ]; do
  next=
  for q in $todo; do
    for t in /proc/$q/task/*/children; do next="$next $(cat "$t" 2>/dev/null)"; done
  done
  todo=$(echo $next); all="$all $todo"
done
kill -STOP -"$p" $all 2>/dev/null
kill -KILL -"$p" $all 2>/dev/null
exit 0
"""


def wrapped_argv(argv: Sequence[str], pidfile: str, stdin_path: str = "/dev/null") -> list[str]:
    """The argv actually exec'd: `WRAP_SCRIPT`, which gives the command its own process group and waits for it."""
    if not argv:
        raise ValueError("argv is empty")
    for i, arg in enumerate(argv):
        if "\0" in arg:
            raise ValueError(f"argv[{i}] contains a NUL byte, which no process argument can carry")
    return ["/bin/sh", "-c", WRAP_SCRIPT, pidfile, stdin_path, *argv]


def oom_kills(status: str) -> bool:
    """Whether the wrapper's status line ("<before> <after>") shows an OOM kill in the container during the command."""
    counts = status.split()
    return len(counts) == 2 and all(c.isdigit() for c in counts) and int(counts[1]) > int(counts[0])


def kill_argv(pidfile: str) -> list[str]:
    return ["/bin/sh", "-c", KILL_SCRIPT, pidfile]


@dataclass(slots=True)
class FrameDecoder:
    """Feed raw bytes from the exec connection; payloads come out in order (stream ids are dropped: interleaved)."""

    _buffer: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> Iterator[bytes]:
        self._buffer += data
        while len(self._buffer) >= HEADER.size:
            _stream, size = HEADER.unpack_from(self._buffer)
            end = HEADER.size + size
            if len(self._buffer) < end:
                return
            payload = bytes(self._buffer[HEADER.size : end])
            del self._buffer[:end]
            if payload:
                yield payload

    @property
    def pending(self) -> int:
        return len(self._buffer)


@dataclass(slots=True)
class CappedBuffer:
    """The first ``cap`` bytes of what was added; ``total`` counts everything (kept or not)."""

    cap: int
    _parts: list[bytes] = field(default_factory=list)
    _size: int = 0
    truncated: bool = False
    total: int = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.cap - self._size
        if len(data) > room:
            self.truncated = True
            data = data[: max(room, 0)]
        if data:
            self._parts.append(data)
            self._size += len(data)

    def value(self) -> bytes:
        return b"".join(self._parts)
