"""One process per run directory: an exclusive lock held for the life of the run.

Two `polar generate` on one ``--out`` (a cron job that overlaps the one before) would both append every row and
state line; two `polar serve` on one state directory would both write the journal. The lock is ``flock(2)`` on
``DIR/.lock``, which holds the holder's pid: the kernel drops it when the process dies however it dies (``kill -9``
included), so a stale lock file never blocks a later run. The file itself stays (removing it would let a third
process lock a new inode while the second still holds the old one).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from polar_cli.errors import DirectoryBusy

LOCK_FILE = ".lock"


@contextlib.contextmanager
def directory_lock(directory: Path, what: str) -> Iterator[None]:
    """Hold the lock of ``directory`` (created if missing) while the block runs; `DirectoryBusy` naming the holder's
    pid when another process holds it. ``what`` names the directory in that message ("run directory")."""
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise DirectoryBusy(
                f"{what} {directory} is in use by another process (pid {holder}); wait for it to end, or use another "
                "directory"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock
