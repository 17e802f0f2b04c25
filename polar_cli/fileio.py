"""Appending to the run's files so that a full disk never leaves half a line: the one write path of JSONL files."""

from __future__ import annotations

import contextlib
import os

from polar_cli.errors import DiskFull, is_disk_full


def append_whole(fd: int, data: bytes, path: object) -> None:
    """Append ``data`` to the O_APPEND file ``fd`` whole, or leave the file as it was and raise (truncating needs no
    free space); a full disk raises `errors.DiskFull`."""
    size = os.fstat(fd).st_size
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        if is_disk_full(exc):
            raise DiskFull(path, exc) from exc
        raise
