"""Capture files on disk: a writer thread that never blocks the event loop, and the readers.

Layout: ``<capture_dir>/<session_id>.jsonl``, one compact line per model call (see `record`). Every line is written
whole and flushed before the next is taken; a process killed mid-write leaves at most one partial last line, which
readers ignore and the writer cuts off before it appends to that file again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from polar_cli.capture.record import CaptureRecord, Compactor, Expander
from polar_cli.errors import CaptureReadError, DiskFull
from polar_cli.fileio import append_whole

_SAFE_ID = re.compile(r"[^A-Za-z0-9_.-]")
_STOP = object()
# a line's own seq: the third key a compactor writes (`record.Compactor.compact`), after a JSON string
_SEQ = re.compile(rb'^\{"v":\d+,"session_id":"(?:[^"\\]|\\.)*","seq":(-?\d+)', re.MULTILINE)
log = logging.getLogger("polar.capture")


def session_file(capture_dir: Path, session_id: str) -> Path:
    return capture_dir / f"{_SAFE_ID.sub('_', session_id)}.jsonl"


@dataclass(eq=False, slots=True)
class _Session:
    """A session's delta state in the writer. Lines queued under a state no longer current (an append of the session
    failed since) are dropped, not written: they are deltas against lines that never reached the file."""

    session_id: str
    path: Path
    compactor: Compactor
    pending: int = 0  # lines queued, not yet appended or dropped
    forgotten: bool = False


class CaptureWriter:
    """Appends records to per-session files; the file writes happen on a background thread.

    Records are compacted on the writing thread (byte and id comparisons at memcmp speed, tens of microseconds) and
    their lines queued; the thread only calls write(2). Keeping Python work off the thread matters: a thread that
    computes holds the GIL for up to the switch interval, and the event loop would wait that long after each of its
    own syscalls. Lines are appended whole, in one write(2) per file per batch, so a killed process loses only what
    is still queued. `flush` waits for the queue; `close` drains it and stops the thread.

    Called on an event loop, `write` holds the record until the loop's next iteration, then compacts it with every
    other record written in this one and hands their lines to the thread as one batch: the answers those records
    belong to are written to their sockets first, and the thread is woken once per iteration, not once per record.
    Each wake-up costs the loop the GIL while the thread takes it; on a busy machine, where the woken thread also
    takes the loop's core, that is the scheduler's time slice, not microseconds. Called off a loop, `write` compacts
    and queues at once. `flush` and `close` hand over what is held before they wait, so what they promise is
    unchanged. A record that cannot be compacted is logged and lost alone.

    A failed append (EMFILE, EIO, ENOSPC...) fails its session only: the session's error is raised by
    ``flush(session_id)`` (`errors.DiskFull` for a full disk), its lines still queued are dropped, and its next record
    starts over from what its file holds. Every other session keeps writing.
    """

    def __init__(self, capture_dir: Path) -> None:
        self.capture_dir = capture_dir
        capture_dir.mkdir(parents=True, exist_ok=True)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # records written on an event loop this iteration, compacted and handed to the thread as one batch
        self._held: list[CaptureRecord] = []
        self._sessions: dict[str, _Session] = {}
        self._errors: dict[str, BaseException] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="polar-capture", daemon=True)
        self._closed = False
        self._thread.start()

    def write(self, record: CaptureRecord) -> None:
        if self._closed:
            raise RuntimeError("capture writer is closed")
        with self._lock:
            self._held.append(record)
            first = len(self._held) == 1
        if first:
            try:
                asyncio.get_running_loop().call_soon(self._hand_over)
            except RuntimeError:  # no event loop in this thread
                self._hand_over()

    def _hand_over(self) -> None:
        """Compact the held records, in the order they were written, and queue their lines as one batch."""
        with self._lock:  # the file gets lines in the order they were compacted
            held, self._held = self._held, []
            lines = [line for record in held if (line := self._compact(record)) is not None]
            if lines:
                self._queue.put(lines)

    def _compact(self, record: CaptureRecord) -> tuple[_Session, bytes] | None:
        try:
            state = self._sessions.get(record.session_id)
            if state is None:
                path = session_file(self.capture_dir, record.session_id)
                state = self._sessions[record.session_id] = _Session(record.session_id, path, _resume(path))
            state.forgotten = False
            line = orjson.dumps(state.compactor.compact(record)) + b"\n"
        except Exception:  # this record is lost, loudly; the others are written
            log.exception("capture of session %s call %d failed", record.session_id, record.seq)
            return None
        state.pending += 1
        return state, line

    def forget(self, session_id: str) -> None:
        """Drop a finished session's delta state (a long run would otherwise keep every session's last bodies).

        Writing to that session again later stays correct: its state is then rebuilt from its file (once the lines
        still queued for it are written: until then the state stays).
        """
        with self._lock:
            state = self._sessions.get(session_id)
            if state is not None:
                state.forgotten = True
                if state.pending == 0:
                    del self._sessions[session_id]

    def flush(self, session_id: str | None = None) -> None:
        """Block until every record written so far is on disk; raise the capture error of ``session_id`` (reported
        once), or without one the first error of any session that `flush` has not reported yet."""
        done = threading.Event()
        self._hand_over()
        self._queue.put(done)
        done.wait()
        with self._lock:
            if session_id is not None:
                error = self._errors.pop(session_id, None)
            else:
                error = next(iter(self._errors.values()), None)
        if error is not None:
            _raise(error)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._hand_over()
        self._queue.put(_STOP)
        self._thread.join()
        error = next(iter(self._errors.values()), None)
        if error is not None:
            _raise(error)

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < 512:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            lines: dict[_Session, list[bytes]] = {}
            stop = False
            for item in batch:
                if item is _STOP:
                    stop = True
                elif isinstance(item, threading.Event):
                    self._append(lines)
                    lines = {}
                    item.set()
                else:
                    for state, line in item:
                        lines.setdefault(state, []).append(line)
            self._append(lines)
            if stop:
                return

    def _append(self, lines: dict[_Session, list[bytes]]) -> None:
        for state, chunk in lines.items():
            with self._lock:
                current = self._sessions.get(state.session_id) is state
            error: BaseException | None = None
            if current:
                try:
                    fd = os.open(state.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                    try:
                        # whole lines or nothing: a write the disk refuses part-way is cut back off
                        append_whole(fd, b"".join(chunk), state.path)
                    finally:
                        os.close(fd)
                except (OSError, DiskFull) as exc:  # this session fails; the others keep writing
                    error = exc
                    log.error("capture of session %s failed, %d records lost: %s", state.session_id, len(chunk), exc)
            with self._lock:
                state.pending -= len(chunk)
                if error is not None:
                    self._errors.setdefault(state.session_id, error)
                    if self._sessions.get(state.session_id) is state:
                        del self._sessions[state.session_id]  # its next record starts over from the file
                elif not current:
                    self._errors.setdefault(state.session_id, RuntimeError("records queued after a failed append"))
                elif state.forgotten and state.pending == 0:
                    del self._sessions[state.session_id]


def _raise(error: BaseException) -> None:
    if isinstance(error, DiskFull):
        raise error
    raise RuntimeError(f"capture writer failed: {error}") from error


def next_seq(path: Path) -> int:
    """The seq a new call of the session in ``path`` should get: one past the highest in the file (0: no file).

    A gateway that restarts with a session's key numbers its calls from here, so seqs stay unique in a file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return 0
    return max((int(m) for m in _SEQ.findall(data, 0, data.rfind(b"\n") + 1)), default=-1) + 1


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
