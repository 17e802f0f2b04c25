"""A full disk never leaves half a line: the write that fails part-way is cut back off, and the error says disk full."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from polar_cli.corpus.writer import JsonlAppender, read_jsonl
from polar_cli.errors import DiskFull
from polar_cli.fileio import append_whole


def half_then_enospc(monkeypatch: pytest.MonkeyPatch) -> None:
    """os.write takes half of what it is given, then the disk is full."""
    real = os.write
    calls = [0]

    def write(fd: int, data: bytes | memoryview) -> int:
        calls[0] += 1
        if calls[0] == 1:
            return real(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", write)


def test_a_row_the_disk_refuses_half_way_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "corpus.jsonl"
    with JsonlAppender(path) as appender:
        appender.append({"key": "a", "text": "kept"})
        before = path.read_bytes()
        half_then_enospc(monkeypatch)
        with pytest.raises(DiskFull, match=r"^disk full: writing .*corpus\.jsonl failed \(No space left on device\)"):
            appender.append({"key": "b", "text": "x" * 10_000})
        monkeypatch.undo()
        assert path.read_bytes() == before and appender.rows == 1
        appender.append({"key": "c"})  # space is back: the file goes on whole
    assert [r["key"] for r in read_jsonl(path)] == ["a", "c"]


def test_other_write_errors_are_not_called_disk_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f.jsonl"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)

    def broken(fd: int, data: bytes | memoryview) -> int:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "write", broken)
    try:
        with pytest.raises(OSError) as caught:
            append_whole(fd, b"line\n", path)
        assert not isinstance(caught.value, DiskFull) and caught.value.errno == errno.EIO
    finally:
        os.close(fd)


def test_dev_full_is_disk_full() -> None:
    fd = os.open("/dev/full", os.O_WRONLY | os.O_APPEND)
    try:
        with pytest.raises(DiskFull):
            append_whole(fd, b"line\n", "/dev/full")
    finally:
        os.close(fd)
