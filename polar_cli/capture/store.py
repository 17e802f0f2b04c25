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
from polar_cli.errors import CaptureReadError, DiskFull
from polar_cli.fileio import append_whole

_SAFE_ID = re.compile(r"[^A-Za-z0-9_.-]")
_STOP = object()


def session_file(capture_dir: Path, session_id: str) -> Path:
    return capture_dir / f"{_SAFE_ID.sub('_', session_id)}.jsonl"


class CaptureWriter:
    """Appends records to per-session files; the file writes happen on a background thread.

    `write` compacts the record on the caller's thread (byte and id comparisons at memcmp speed, tens of
    microseconds) and enqueues the finished line; the thread only calls write(2). Keeping Python work off the thread
    matters: a thread that computes holds the GIL for up to the switch interval, and the event loop would wait that
    long after each of its own syscalls. Lines are appended whole, in one write(2) per file per batch, so a killed
    process loses only what is still queued. `flush` waits for the queue; `close` drains it and stops the thread.
    """

    def __init__(self, capture_dir: Path) -> None:
        self.capture_dir = capture_dir
        capture_dir.mkdir(parents=True, exist_ok=True)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._compactors: dict[str, Compactor] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="polar-capture", daemon=True)
        self._error: BaseException | None = None
        self._closed = False
        self._thread.start()

    def write(self, record: CaptureRecord) -> None:
        if self._closed:
            raise RuntimeError("capture writer is closed")
        path = session_file(self.capture_dir, record.session_id)
        with self._lock:
            compactor = self._compactors.get(record.session_id)
            if compactor is None:
                compactor = self._compactors[record.session_id] = _resume(path)
            line = orjson.dumps(compactor.compact(record)) + b"\n"
        self._queue.put((path, line))

    def forget(self, session_id: str) -> None:
        """Drop a finished session's delta state (a long run would otherwise keep every session's last bodies).

        Writing to that session again later stays correct: its state is then rebuilt from its file.
        """
        with self._lock:
            self._compactors.pop(session_id, None)

    def flush(self) -> None:
        """Block until every record written so far is on disk (for tests and shutdown)."""
        done = threading.Event()
        self._queue.put(done)
        done.wait()
        self._raise()

    def _raise(self) -> None:
        if isinstance(self._error, DiskFull):
            raise self._error
        if self._error is not None:
            raise RuntimeError("capture writer failed") from self._error

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join()
        self._raise()

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < 512:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            lines: dict[Path, list[bytes]] = {}
            stop = False
            for item in batch:
                if item is _STOP:
                    stop = True
                elif isinstance(item, threading.Event):
                    self._append(lines)
                    lines = {}
                    item.set()
                else:
                    lines.setdefault(item[0], []).append(item[1])
            self._append(lines)
            if stop:
                return

    def _append(self, lines: dict[Path, list[bytes]]) -> None:
        for path, chunk in lines.items():
            try:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                try:
                    # whole lines or nothing: a write the disk refuses part-way is cut back off
                    append_whole(fd, b"".join(chunk), path)
                finally:
                    os.close(fd)
            except (OSError, DiskFull) as exc:  # keep writing the other sessions; the error surfaces on flush/close
                self._error = exc


def _resume(path: Path) -> Compactor:
    """A compactor primed with the records already in ``path``, whose partial last line (if any) is cut off."""
    compactor = Compactor()
    if not path.exists():
        return compactor
    data = path.read_bytes()
    end = data.rfind(b"\n") + 1
    if end != len(data):
        os.truncate(path, end)
    for record in _expand_lines(data):
        compactor.compact(record)
    return compactor


def _lines(data: bytes) -> Iterator[memoryview]:
    """The newline-terminated lines of ``data`` as views (a torn last line, without its newline, is left out)."""
    view = memoryview(data)
    start = 0
    while (end := data.find(b"\n", start)) >= 0:
        yield view[start:end]
        start = end + 1


def _expand_lines(data: bytes, *, views: bool = False) -> Iterator[CaptureRecord]:
    expander = Expander(views=views)
    for raw in _lines(data):
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return  # a torn line can only be the last one written
        yield expander.expand(line)


def read_session(path: Path) -> list[CaptureRecord]:
    """Every complete record of one session file, with full token arrays and bodies rebuilt.

    Raises `CaptureReadError` for a file that is corrupt or of an unknown capture format (a torn last line is not
    corrupt: it is what a killed writer leaves, and is ignored).
    """
    return _read(path, views=False)


def read_session_views(path: Path) -> list[CaptureRecord]:
    """`read_session` with every ``prompt_ids`` a `PromptView`: what the trajectory builders read.

    Each call's prompt is rebuilt by appending its stored suffix to its base's buffer, not by copying the base, so
    reading costs what is on disk however long the session grows.
    """
    return _read(path, views=True)


def _read(path: Path, *, views: bool) -> list[CaptureRecord]:
    data = path.read_bytes()
    try:
        return list(_expand_lines(data, views=views))
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, OverflowError) as exc:
        raise CaptureReadError(f"{path}: unreadable capture file: {exc!r}") from exc


def read_capture_dir(capture_dir: Path) -> dict[str, list[CaptureRecord]]:
    """All sessions of a capture directory, keyed by session id, each in call order."""
    sessions: dict[str, list[CaptureRecord]] = {}
    for path in sorted(capture_dir.glob("*.jsonl")):
        records = read_session(path)
        if records:
            sessions[records[0].session_id] = records
    return sessions
