"""What the rollout service holds of each task in memory, and what it leaves on disk.

A finished session's result (its token arrays: ~11 MiB per 8-sample task of 33k-token traces) is journaled to its
task's results file (`journal`, Rule 1) and dropped from memory: a task keeps a small summary per sample (status,
reward, session id: what counts, rewards, early stop and the events need), and a whole result is read back from
disk when a trainer asks for it (`ResultCache`, a bounded LRU of tasks' results). A result the journal could not
write (an I/O error other than a full disk, which stops the service) stays in memory, so the task still completes.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from polar_cli.node.pools import Job, RunEnd, Timings
from polar_cli.serve.journal import TaskRecord
from polar_cli.serve.results import SessionOutput
from polar_cli.serve.stages import SessionJob
from polar_cli.serve.tasks import TaskPlan

# the fields of a result a task keeps in memory
SUMMARY_FIELDS = ("index", "status", "reward", "session_id", "masked")
# tasks whose whole results the cache holds (a group of 8 sessions of 33k-token traces: ~11 MiB)
CACHED_TASKS = 4


def summary(result: dict[str, Any]) -> dict[str, Any]:
    return {k: result.get(k) for k in SUMMARY_FIELDS}


@dataclass(slots=True)
class TaskState:
    record: TaskRecord
    plan: TaskPlan | None
    # sample index -> its result's summary (`summary`); ``loaded``: False for a task replayed done, until asked
    results: dict[int, dict[str, Any]] = field(default_factory=dict)
    loaded: bool = True
    # whole results the journal failed to write: held here, served from here
    unjournaled: dict[int, dict[str, Any]] = field(default_factory=dict)
    attempts: dict[int, int] = field(default_factory=dict)
    # sample index -> stage it is in (queued, init, ready, running, postrun) while it has no result
    stages: dict[int, str] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    cut: str | None = None  # why the samples still open are cut (cancel, early stop)

    @property
    def request(self) -> dict[str, Any]:
        return self.record.request

    @property
    def done(self) -> bool:
        return self.record.done_at is not None


class ResultCache:
    """Tasks' whole results as read back from their results files, the ``size`` most recently asked for."""

    def __init__(self, read: Callable[[str], dict[int, dict[str, Any]]], size: int = CACHED_TASKS) -> None:
        self.read = read
        self.size = size
        self._tasks: OrderedDict[str, dict[int, dict[str, Any]]] = OrderedDict()

    def get(self, task: TaskState) -> dict[int, dict[str, Any]]:
        task_id = task.record.task_id
        found = self._tasks.get(task_id)
        if found is None or len(found) < len(task.results) - len(task.unjournaled):
            found = self.read(task_id)
            self._tasks[task_id] = found
            while len(self._tasks) > self.size:
                self._tasks.popitem(last=False)
        self._tasks.move_to_end(task_id)
        wanted = set(task.results) if task.loaded else set(found) | set(task.unjournaled)
        merged = {**found, **task.unjournaled}
        return {i: merged[i] for i in sorted(wanted) if i in merged}

    def forget(self, task_id: str) -> None:
        self._tasks.pop(task_id, None)


def failed_output(job: Job[SessionJob], session: Any, end: RunEnd, timings: Timings, failure: str) -> SessionOutput:
    """The output of a session whose POSTRUN or result handling raised (`node.pools` Rule 5): a machinery error,
    retried (``service.session_retries``) and then returned fully masked, never lost."""
    session_id = getattr(session, "session_id", None) or (session if isinstance(session, str) else "")
    if end.reason != "ok":
        failure = f"{failure} (after {end.reason}: {end.error})"
    return SessionOutput(session_id, "error", reason=f"postrun_error: {failure}", timings=timings.to_dict())


class ObservedStages:
    """The node's stages, telling the service each session's stage as it enters it (the events stream)."""

    def __init__(self, inner: Any, seen: Any) -> None:
        self.inner = inner
        self.seen = seen

    async def init(self, job: Job[SessionJob], deadline: float) -> Any:
        self.seen(job.payload, "init")
        session = await self.inner.init(job, deadline)
        self.seen(job.payload, "ready")
        return session

    async def run(self, job: Job[SessionJob], session: Any, deadline: float) -> Any:
        self.seen(job.payload, "running")
        return await self.inner.run(job, session, deadline)

    async def postrun(self, job: Job[SessionJob], session: Any, end: Any, timings: Timings) -> SessionOutput:
        self.seen(job.payload, "postrun")
        output: SessionOutput = await self.inner.postrun(job, session, end, timings)
        return output

    async def discard(self, job: Job[SessionJob], session: Any) -> None:
        await self.inner.discard(job, session)
