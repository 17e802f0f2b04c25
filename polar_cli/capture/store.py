"""Capture files on disk: a writer thread that never blocks the event loop, and the readers.

Layout: ``<capture_dir>/<session_id>.jsonl``, one compact line per model call (see `record`). Every line is written
whole and flushed before the next is taken; a process killed mid-write leaves at most one partial last line, which
readers ignore and the writer cuts off before it appends to that file again.
"""

from __future__ import annotations

import os
import queue
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from polar_cli.capture.record import CaptureRecord, Compactor, Expander

_SAFE_ID = re.compile(r"[^A-Za-z0-9_.-]")
_STOP = object()


def session_file(capture_dir: Path, session_id: str) -> Path:
    return capture_dir / f"{_SAFE_ID.sub('_', session_id)}.jsonl"


class CaptureWriter:
    """Appends records to per-session files from a background thread.

    `write` only enqueues (safe from the event loop); `close` drains the queue. Each line goes out in one write(2) on
    a file opened for append, so a killed process loses only what is still queued. The compaction (prefix search,
    dict comparison) runs on the writer thread too, off the request path.
    """

    def __init__(self, capture_dir: Path) -> None:
        self.capture_dir = capture_dir
        capture_dir.mkdir(parents=True, exist_ok=True)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._compactors: dict[str, Compactor] = {}
        self._thread = threading.Thread(target=self._run, name="polar-capture", daemon=True)
        self._error: BaseException | None = None
        self._closed = False
        self._thread.start()

    def write(self, record: CaptureRecord) -> None:
        if self._closed:
            raise RuntimeError("capture writer is closed")
        self._queue.put(record)

    def flush(self) -> None:
        """Block until every record written so far is on disk (for tests and shutdown)."""
        done = threading.Event()
        self._queue.put(done)
        done.wait()
        if self._error is not None:
            raise RuntimeError("capture writer failed") from self._error

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()
        if self._error is not None:
            raise RuntimeError("capture writer failed") from self._error

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                self._append(item)
            except BaseException as exc:  # keep serving; the error surfaces on flush/close
                self._error = exc

    def _append(self, record: CaptureRecord) -> None:
        path = session_file(self.capture_dir, record.session_id)
        compactor = self._compactors.get(record.session_id)
        if compactor is None:
            compactor = self._compactors[record.session_id] = _resume(path)
        line = orjson.dumps(compactor.compact(record)) + b"\n"
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def _resume(path: Path) -> Compactor:
    """A compactor primed with the records already in ``path``, whose partial last line (if any) is cut off."""
    compactor = Compactor()
    if not path.exists():
        return compactor
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        os.truncate(path, end)
    for record in _expand_lines(data[:end].splitlines()):
        compactor.compact(record)
    return compactor


def _expand_lines(lines: list[bytes]) -> Iterator[CaptureRecord]:
    expander = Expander()
    for raw in lines:
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return  # a torn line can only be the last one written
        yield expander.expand(line)


def read_session(path: Path) -> list[CaptureRecord]:
    """Every complete record of one session file, with full token arrays and bodies rebuilt."""
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    return list(_expand_lines(data[:end].splitlines()))


def read_capture_dir(capture_dir: Path) -> dict[str, list[CaptureRecord]]:
    """All sessions of a capture directory, keyed by session id, each in call order."""
    sessions: dict[str, list[CaptureRecord]] = {}
    for path in sorted(capture_dir.glob("*.jsonl")):
        records = read_session(path)
        if records:
            sessions[records[0].session_id] = records
    return sessions
