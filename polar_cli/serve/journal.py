"""The service's journal: tasks, session results and callback deliveries on disk, safe against ``kill -9``.

    STATE_DIR/
      journal.jsonl        small lines: task (its request), result (a pointer), cancel, done, delivery, weights
      results/<task>.jsonl one whole SessionResult per line (token arrays included), in the order sessions finished
      capture/ logs/ artifacts/

The rules (the same as a generate run directory's, `generate.state`):

- Rule 1: a session's result is appended to its task's results file (one write(2) of one whole line) BEFORE its
  pointer line in the journal. A result the journal names is always on disk.
- Rule 2: opening the journal cuts a torn last line off every file it reads (`corpus.writer.repair_tail`).
- Rule 3: a kill between a result and its pointer leaves a result the journal does not name; opening the journal
  reads the results file of every unfinished task and adopts such results. So a result written before a kill is
  kept, and its session is never run again.
- Rule 4: a task's request is journaled before the service answers 202, so an accepted task survives a crash.
- Rule 5: ``done`` is journaled after the task's last result; a callback is delivered after ``done`` and marked
  ``delivered`` only when the receiver answered 2xx: after a crash, every done task not marked delivered is delivered
  again (at least once, with the same idempotency key).

The first result line for a sample wins: a sample is never counted twice.
Replaying reads the journal and the results of unfinished tasks only; a finished task's results are read when asked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from polar_cli.corpus.writer import JsonlAppender, read_jsonl, repair_tail

JOURNAL = "journal.jsonl"
RESULTS = "results"


@dataclass(slots=True)
class TaskRecord:
    """A task as the journal knows it."""

    task_id: str
    request: dict[str, Any]
    digest: str
    submitted_at: float
    cancelled: bool = False
    done_at: float | None = None
    state: str = "queued"
    delivered: bool = False
    delivery_attempts: int = 0
    delivery_error: str | None = None
    # index -> SessionResult; None for a finished task until its results are read (`Journal.results`)
    results: dict[int, dict[str, Any]] | None = field(default_factory=dict)


class Journal:
    """An open state directory: `replay` gives what it holds; the writers keep Rules 1-5."""

    def __init__(self, state_dir: Path, *, fsync: bool = False) -> None:
        self.dir = state_dir
        for sub in ("", RESULTS, "capture", "logs", "artifacts"):
            (state_dir / sub).mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._journal = JsonlAppender(state_dir / JOURNAL, fsync=fsync)
        self._appenders: dict[str, JsonlAppender] = {}
        self.weight_version: str | None = None
        self.adopted = 0

    # ---- reading -------------------------------------------------------------------------------------------------

    def replay(self) -> dict[str, TaskRecord]:
        """Every task the journal holds, with the results of the unfinished ones (Rule 3 applied)."""
        tasks: dict[str, TaskRecord] = {}
        named: dict[str, set[int]] = {}
        for e in read_jsonl(self.dir / JOURNAL):
            kind, task_id = e.get("type"), str(e.get("task_id"))
            if kind == "weights":
                self.weight_version = e.get("version")
                continue
            if kind == "task":
                tasks[task_id] = TaskRecord(task_id, e["request"], e["digest"], float(e["t"]))
                continue
            task = tasks.get(task_id)
            if task is None:
                continue
            if kind == "result":
                named.setdefault(task_id, set()).add(int(e["index"]))
            elif kind == "cancel":
                task.cancelled = True
            elif kind == "done":
                task.done_at, task.state, task.results = float(e["t"]), str(e["state"]), None
            elif kind == "delivery":
                task.delivery_attempts = max(task.delivery_attempts, int(e.get("attempt") or 0))
                task.delivered = task.delivered or bool(e.get("ok"))
                task.delivery_error = None if e.get("ok") else e.get("error")
        for task in tasks.values():
            if task.results is not None:
                task.results = self._read_results(task.task_id, repair=True)
                missing = set(task.results) - named.get(task.task_id, set())
                for index in sorted(missing):
                    self._journal.append({"type": "result", "task_id": task.task_id, "index": index, "t": time.time()})
                    self.adopted += 1
        return tasks

    def results(self, task_id: str) -> dict[int, dict[str, Any]]:
        """A task's session results by sample index (the first line per index)."""
        return self._read_results(task_id)

    def _read_results(self, task_id: str, *, repair: bool = False) -> dict[int, dict[str, Any]]:
        path = self._results_path(task_id)
        if not path.exists():
            return {}
        if repair and task_id not in self._appenders:
            repair_tail(path)
        found: dict[int, dict[str, Any]] = {}
        for row in read_jsonl(path):
            found.setdefault(int(row["index"]), row)
        return found

    def _results_path(self, task_id: str) -> Path:
        return self.dir / RESULTS / f"{task_id}.jsonl"

    # ---- writing (the event loop's thread only) ----------------------------------------------------------------

    def _append(self, entry: dict[str, Any]) -> None:
        self._journal.append({**entry, "t": entry.get("t", time.time())})

    def add_task(self, task_id: str, request: dict[str, Any], digest: str) -> float:
        """Rule 4; returns the submission time."""
        t = time.time()
        self._append({"type": "task", "task_id": task_id, "request": request, "digest": digest, "t": t})
        return t

    def add_result(self, task_id: str, result: dict[str, Any]) -> None:
        """Rule 1: the whole result, then its pointer."""
        appender = self._appenders.get(task_id)
        if appender is None:
            appender = self._appenders[task_id] = JsonlAppender(self._results_path(task_id), fsync=self.fsync)
        appender.append(result)
        self._append({"type": "result", "task_id": task_id, "index": result["index"], "status": result["status"]})

    def cancel(self, task_id: str) -> None:
        self._append({"type": "cancel", "task_id": task_id})

    def done(self, task_id: str, state: str) -> float:
        """Rule 5; returns the time it was done."""
        appender = self._appenders.pop(task_id, None)
        if appender is not None:
            appender.close()
        t = time.time()
        self._append({"type": "done", "task_id": task_id, "state": state, "t": t})
        return t

    def delivery(self, task_id: str, attempt: int, *, ok: bool, error: str | None = None) -> None:
        self._append({"type": "delivery", "task_id": task_id, "attempt": attempt, "ok": ok, "error": error})

    def set_weights(self, version: str) -> None:
        self.weight_version = version
        self._append({"type": "weights", "version": version})

    def close(self) -> None:
        for appender in self._appenders.values():
            appender.close()
        self._appenders.clear()
        self._journal.close()


def request_digest(request: dict[str, Any]) -> str:
    """The identity of a request body: the same body (keys in any order) gives the same digest."""
    import hashlib

    return hashlib.sha256(orjson.dumps(request, option=orjson.OPT_SORT_KEYS)).hexdigest()
