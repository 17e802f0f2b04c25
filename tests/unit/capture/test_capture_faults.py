"""A failed capture append (EIO, EMFILE, ENOSPC) fails its own session, never the writer (issue 23 #5): before, one
failure left `CaptureWriter` failed, and every later session's POSTRUN raised for the rest of the run."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from polar_cli.capture import CaptureWriter, read_session
from polar_cli.capture.store import session_file
from polar_cli.errors import DiskFull
from tests.unit.capture.test_capture_store import _growing_session


def _fail_once(monkeypatch: pytest.MonkeyPatch, name: str, code: int) -> Callable[[], int]:
    """``os.<name>`` raises OSError(code) on its next call, then behaves; returns how many calls failed."""
    real = getattr(os, name)
    failed = [0]

    def once(*args: object, **kwargs: object) -> object:
        if not failed[0]:
            failed[0] += 1
            raise OSError(code, os.strerror(code))
        return real(*args, **kwargs)

    monkeypatch.setattr(os, name, once)
    return lambda: failed[0]


@pytest.mark.parametrize(
    ("call", "code", "raised"),
    [
        ("write", errno.EIO, RuntimeError),
        ("write", errno.ENOSPC, DiskFull),
        ("open", errno.EMFILE, RuntimeError),
        ("open", errno.ENFILE, RuntimeError),
    ],
)
def test_a_failed_append_fails_its_session_and_later_sessions_write_normally(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, code: int, raised: type[Exception]
) -> None:
    writer = CaptureWriter(tmp_path)
    bad, good = _growing_session(4, "bad"), _growing_session(4, "good")
    writer.write(bad[0])
    writer.flush("bad")
    failures = _fail_once(monkeypatch, call, code)
    writer.write(bad[1])
    with pytest.raises(raised):
        writer.flush("bad")
    assert failures() == 1
    writer.flush("bad")  # reported once
    # every other session, then and later, writes and reads back normally
    for record in good:
        writer.write(record)
    writer.flush("good")
    assert read_session(session_file(tmp_path, "good")) == good
    # the failed session goes on from what its file holds: its lost call is missing, the rest rebuild exactly
    writer.write(bad[2])
    writer.write(bad[3])
    writer.flush("bad")
    assert read_session(session_file(tmp_path, "bad")) == [bad[0], bad[2], bad[3]]
    writer.close()  # the failure was reported to its session: nothing left to raise


def test_a_failure_no_session_flush_reported_is_raised_by_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = CaptureWriter(tmp_path)
    _fail_once(monkeypatch, "write", errno.ENOSPC)
    writer.write(_growing_session(1)[0])
    with pytest.raises(DiskFull):
        writer.close()


def test_lines_queued_behind_a_failed_append_are_dropped_not_written_against_a_lost_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the deltas queued after the failed one name bases that never reached the file: writing them would corrupt it
    writer = CaptureWriter(tmp_path)
    records = _growing_session(5)
    writer.write(records[0])
    writer.flush()
    real = os.write
    calls = [0]

    def eio_first(fd: int, data: bytes | memoryview) -> int:
        calls[0] += 1
        if calls[0] == 1:
            raise OSError(errno.EIO, "Input/output error")
        return real(fd, data)

    monkeypatch.setattr(os, "write", eio_first)
    for record in records[1:4]:
        writer.write(record)
    with pytest.raises(RuntimeError, match="capture writer failed"):
        writer.flush("s1")
    monkeypatch.undo()
    writer.write(records[4])
    writer.close()
    # whichever lines shared the failed batch are lost; every line on disk rebuilds its record exactly, in order
    back = read_session(session_file(tmp_path, "s1"))
    assert back[0] == records[0] and back[-1] == records[4] and records[1] not in back
    assert [records.index(r) for r in back] == sorted(records.index(r) for r in back)


def test_forget_keeps_a_sessions_state_until_its_queued_lines_are_written(tmp_path: Path) -> None:
    writer = CaptureWriter(tmp_path)
    records = _growing_session(3)
    writer.write(records[0])
    writer.write(records[1])
    writer.forget("s1")  # lines may still be queued: a later record must not resume from a file missing them
    writer.write(records[2])
    writer.close()
    assert read_session(session_file(tmp_path, "s1")) == records
