"""Pieces of `docker exec` that need no engine: the stream frame decoder, the output cap, the wrapper scripts.

Docker multiplexes a non-TTY exec's stdout and stderr on one connection as frames: an 8-byte header (stream byte, three
zero bytes, big-endian payload length) and the payload. `FrameDecoder` turns bytes into payloads (sans-IO, fed in any
chunking); `CappedBuffer` keeps the first N bytes and counts the rest.
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
    """The argv actually exec'd: `setsid -w` gives the command its own process group (and waits for it)."""
    if not argv:
        raise ValueError("argv is empty")
    for i, arg in enumerate(argv):
        if "\0" in arg:
            raise ValueError(f"argv[{i}] contains a NUL byte, which no process argument can carry")
    return ["setsid", "-w", "/bin/sh", "-c", RUN_SCRIPT, pidfile, stdin_path, *argv]


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
    cap: int
    _parts: list[bytes] = field(default_factory=list)
    _size: int = 0
    truncated: bool = False

    def add(self, data: bytes) -> None:
        room = self.cap - self._size
        if len(data) > room:
            self.truncated = True
            data = data[: max(room, 0)]
        if data:
            self._parts.append(data)
            self._size += len(data)

    def value(self) -> bytes:
        return b"".join(self._parts)
