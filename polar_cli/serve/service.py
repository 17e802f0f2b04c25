"""The rollout service: tasks in, GRPO groups of graded, token-exact trajectories out, durable across crashes.

    submit(TaskRequest) -> journal (Rule 4 of `journal`) -> one SessionJob per sample -> SessionQueue
        -> the node's stage pools (INIT -> READY -> RUN -> POSTRUN, `node.pools`) -> SessionOutput
        -> retry a machinery error (``service.session_retries``), else the training-safety rules (`results`)
        -> journal (Rule 1) -> events, waiters -> the task's last result: done -> callback (`callbacks`)

Everything runs on one event loop; the only state that matters across a crash is the journal's. On start the
journal is replayed: finished tasks are served from it, unfinished ones have their missing samples queued again, and
done tasks whose callback was never acknowledged are delivered again.

Cancelling a task (DELETE) takes its queued samples out (each becomes a masked placeholder at once) and ends its
sessions in flight through POSTRUN (their containers removed, their results ``cancelled``). Early stop
(``early_stop_min_usable_sessions``) does the same to the samples left once enough are usable. A pause (weight sync)
holds every model call at the gateway (`gateway.pause`); sessions keep their containers and go on after resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from polar_cli.errors import DiskFull
from polar_cli.node.pools import Job, StagePools, Timings
from polar_cli.serve.callbacks import Deliveries
from polar_cli.serve.config import ServeConfig
from polar_cli.serve.finished import FinishedLog
from polar_cli.serve.held import ObservedStages, ResultCache, TaskState, failed_output, summary
from polar_cli.serve.journal import Journal, TaskRecord, request_digest
from polar_cli.serve.models import TaskRequest
from polar_cli.serve.node import Node
from polar_cli.serve.queue import SessionQueue
from polar_cli.serve.results import SessionOutput, placeholder_result, session_result, task_result, usable
from polar_cli.serve.shaping import shape
from polar_cli.serve.stages import SessionJob
from polar_cli.serve.tasks import Manifests, TaskError, TaskPlan, resolve

log = logging.getLogger("polar.serve")
# seconds a POSTRUN may take beyond the evaluation's own timeout (collect, build, write) before the pools end it as an
# error (`node.pools` Rule 5): every task completes
POSTRUN_SLACK = 600.0


class Conflict(Exception):
    """A task id reused with another body (409)."""


class NotFound(Exception):
    """No such task (404)."""


class Paused(Exception):
    """New work refused while paused (503, ``service.refuse_while_paused``)."""


class RolloutService:
    def __init__(self, config: ServeConfig, journal: Journal, node: Node) -> None:
        self.config = config
        self.journal = journal
        self.node = node
        self.tasks: dict[str, TaskState] = {}
        self.cache = ResultCache(journal.results)
        self.queue = SessionQueue()
        self.manifests = Manifests()
        self.offered = config.adapters()
        self.deliveries = Deliveries(config.service.callback, self._journal_delivery)
        self.pools: StagePools[SessionJob, Any, SessionOutput] | None = None
        self.paused: str | None = None
        self.finished = FinishedLog()
        self.started_at = time.time()
        self._closing = False
        self._runner: asyncio.Task[None] | None = None
        self.stopped = asyncio.Event()
        self.fatal: BaseException | None = None

    # ---- life ---------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.node.start()
        stages = ObservedStages(self.node.stages(self._cut_reason), self._seen)
        self.pools = StagePools(
            stages,
            self.node.limits,
            self._on_result,
            hold=lambda: not self._closing,
            fatal=(DiskFull,),
            failed=failed_output,
            postrun_timeout=self.config.timeouts.eval + POSTRUN_SLACK,
            deadline_clock=getattr(self.node, "deadline_clock", None),  # pause time credited to deadlines
        )
        self.node.attach(self.pools)
        records = self.journal.replay()
        await self._preload(records.values())
        self._recover(records)
        if self.journal.weight_version is not None and self.node.gate is not None:  # the journal's, replayed
            await _maybe(self.node.gate.set_weight_version(self.journal.weight_version))
        self._runner = asyncio.get_running_loop().create_task(self._run())

    async def _preload(self, records: Any) -> None:
        """Read the manifests the unfinished tasks name off the event loop (`tasks.Manifests`)."""
        for record in records:
            if record.done_at is None:
                with contextlib.suppress(TaskError, ValueError):  # `_recover` says why it can no longer run
                    await self.manifests.preload(TaskRequest.model_validate(record.request))

    def _recover(self, records: dict[str, TaskRecord]) -> None:
        if self.journal.adopted:
            log.info("adopted %d result(s) written just before the service was killed", self.journal.adopted)
        for done in sorted((r for r in records.values() if r.done_at is not None), key=lambda r: r.done_at or 0.0):
            self.finished.add(done.task_id)
        for record in records.values():
            plan = None
            if record.done_at is None:
                try:
                    plan = self._plan(TaskRequest.model_validate(record.request))
                except (TaskError, ValueError) as exc:
                    log.error("task %s can no longer run (%s): its open samples end as errors", record.task_id, exc)
            results = {i: summary(r) for i, r in (record.results or {}).items()}
            task = TaskState(record, plan, results=results, loaded=record.done_at is None)
            record.results = None  # the whole results stay on disk (`held`)
            self.tasks[record.task_id] = task
            if record.done_at is not None:
                self._deliver(task)
                continue
            request = TaskRequest.model_validate(record.request)
            for index in range(request.num_samples):
                if index in task.results:
                    continue
                if plan is None:
                    self._finish(task, index, self._placeholder(task, index, "error", "the task can no longer run"))
                elif record.cancelled:
                    self._finish(task, index, self._placeholder(task, index, "cancelled", "cancelled"))
                else:
                    self._enqueue(task, index)
            self._check_done(task)

    async def _run(self) -> None:
        assert self.pools is not None
        try:
            await self.pools.run(self.queue)
        except DiskFull as exc:
            log.error("%s; the service stops, results so far are kept", exc)
            self.fatal = exc
        except asyncio.CancelledError:
            pass
        finally:
            self.stopped.set()

    async def stop(self) -> None:
        self._closing = True
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)
        await self.deliveries.close()
        try:
            await self.node.stop()
        finally:
            self.journal.close()

    # ---- tasks --------------------------------------------------------------------------------------------------

    def _plan(self, request: TaskRequest) -> TaskPlan:
        return resolve(request, self.config, self.offered, self.manifests)

    def submit(self, request: TaskRequest) -> tuple[bool, TaskState]:
        """(created, the task): a resubmit of the same body is the same task; another body is a `Conflict`."""
        body = request.model_dump(mode="json")
        digest = request_digest(body)
        existing = self.tasks.get(request.task_id)
        if existing is not None:
            if existing.record.digest != digest:
                raise Conflict(f"task {request.task_id} exists with another body")
            return False, existing
        if self.paused is not None and self.config.service.refuse_while_paused:
            raise Paused(f"the service is paused ({self.paused}) for a weight update; submit again after resume")
        plan = self._plan(request)
        submitted = self.journal.add_task(request.task_id, body, digest)
        task = TaskState(TaskRecord(request.task_id, body, digest, submitted), plan)
        self.tasks[request.task_id] = task
        for index in range(request.num_samples):
            self._enqueue(task, index)
        return True, task

    def _enqueue(self, task: TaskState, index: int, *, retry: bool = False) -> None:
        assert task.plan is not None
        attempt = task.attempts.get(index, 0) + 1
        task.attempts[index] = attempt
        job = SessionJob(task.plan, index, attempt)
        timeout = self.node.job_timeout(task.plan.timeout)
        self.queue.push(Job(job.key, job, timeout), task.plan.request.priority, first=retry)
        self._event(task, index, "retry" if retry else "queued", attempt=attempt)
        if self.pools is not None:
            self.pools.feed()

    def get(self, task_id: str) -> TaskState:
        task = self.tasks.get(task_id)
        if task is None:
            raise NotFound(f"no task {task_id}")
        return task

    def cancel(self, task_id: str) -> TaskState:
        task = self.get(task_id)
        if task.done or task.record.cancelled:
            return task
        task.record.cancelled = True
        self.journal.cancel(task_id)
        self._cut(task, "cancelled")
        return task

    def _cut(self, task: TaskState, why: str) -> None:
        """End the task's open samples: queued ones at once, those in flight through POSTRUN."""
        task.cut = why
        mine = lambda job: job.payload.task_id == task.record.task_id  # noqa: E731
        for job in self.queue.remove(mine):
            index = job.payload.index
            self._finish(task, index, self._placeholder(task, index, "cancelled", why))
        if self.pools is not None:
            self.pools.cancel(mine, why)
        self._check_done(task)

    def _cut_reason(self, job: SessionJob) -> str | None:
        task = self.tasks.get(job.task_id)
        return task.cut if task is not None else None

    # ---- results ------------------------------------------------------------------------------------------------

    def _placeholder(self, task: TaskState, index: int, status: str, reason: str) -> dict[str, Any]:
        request = TaskRequest.model_validate(task.request)
        result = placeholder_result(
            task.record.task_id,
            index,
            f"{reason}" if reason.startswith(status) else f"{status}: {reason}",
            node_id=self.node.node_id,
            seed=request.sampling.for_sample(index).get("seed"),
            metadata=request.metadata,
        )
        result["status"] = status
        return result

    def _on_result(self, job: Job[SessionJob], output: SessionOutput, timings: Timings) -> None:
        sj = job.payload
        task = self.tasks[sj.task_id]
        if sj.index in task.results:
            return
        request = sj.plan.request
        if task.cut is None and output.status == "error" and sj.attempt <= self.config.service.session_retries:
            log.info("task %s sample %d: %s; it runs again", sj.task_id, sj.index, output.reason)
            self._enqueue(task, sj.index, retry=True)
            return
        if task.cut is not None and task.cut != "cancelled":  # early stop: a placeholder keeps the group's size
            result = self._placeholder(task, sj.index, "cancelled", task.cut)
            result.update(session_id=output.session_id, timings=dict(output.timings))
        else:
            result = session_result(
                sj.task_id,
                sj.index,
                output,
                attempts=sj.attempt,
                node_id=self.node.node_id,
                seed=request.sampling.for_sample(sj.index).get("seed"),
                metadata=request.metadata,
            )
        self._finish(task, sj.index, result)
        self._check_early_stop(task)
        self._check_done(task)

    def _finish(self, task: TaskState, index: int, result: dict[str, Any]) -> None:
        result = shape(
            result,
            task.request.get("trainer"),
            masked_reward=self.config.service.masked_reward,
            logprobs_mode=self.config.service.logprobs_mode or self.node.info().get("logprobs_mode"),
        )
        try:
            self.journal.add_result(task.record.task_id, result)
        except DiskFull:
            raise  # the service stops (`_run`); the sample runs again after a restart
        except OSError as exc:  # held in memory instead: the task still completes
            log.error(
                "task %s sample %d: journaling its result failed (%s); it is held in memory",
                task.record.task_id,
                index,
                exc,
            )
            task.unjournaled[index] = result
        task.results[index] = summary(result)
        self.cache.forget(task.record.task_id)
        task.stages.pop(index, None)
        self._event(task, index, result["status"], reward=result["reward"], session_id=result["session_id"])

    def _check_early_stop(self, task: TaskState) -> None:
        n = task.request.get("early_stop_min_usable_sessions")
        if n is None or task.cut is not None or task.done:
            return
        if sum(usable(r) for r in task.results.values()) >= n and len(task.results) < task.request["num_samples"]:
            self._cut(task, f"early stop: {n} usable session(s) reached")

    def _check_done(self, task: TaskState) -> None:
        if task.done or len(task.results) < task.request["num_samples"]:
            return
        state = "cancelled" if task.record.cancelled else "completed"
        failure: OSError | DiskFull | None = None
        try:
            done_at = self.journal.done(task.record.task_id, state)
        except (OSError, DiskFull) as exc:  # done in memory all the same; a restart finds it done again
            log.error("task %s: journaling that it is done failed: %s", task.record.task_id, exc)
            done_at, failure = time.time(), exc
        task.record.done_at, task.record.state = done_at, state
        task.plan = None  # what only running samples need
        self._event(task, None, "done", outcome=state)
        self.finished.add(task.record.task_id)
        self._deliver(task)
        if isinstance(failure, DiskFull):
            raise failure

    def _deliver(self, task: TaskState) -> None:
        url = task.request.get("callback_url")
        if not url or task.record.delivered:
            return
        task_id = task.record.task_id

        async def payload() -> dict[str, Any]:
            return self.result(task_id)

        self.deliveries.start(task_id, url, payload, attempts_made=task.record.delivery_attempts)

    def _journal_delivery(self, task_id: str, attempt: int, ok: bool, error: str | None) -> None:
        self.journal.delivery(task_id, attempt, ok=ok, error=error)
        record = self.tasks[task_id].record
        record.delivery_attempts, record.delivered = attempt, record.delivered or ok
        record.delivery_error = None if ok else error

    def results_of(self, task: TaskState) -> dict[int, dict[str, Any]]:
        """The task's whole results by sample index, read back from disk (`held`)."""
        full = self.cache.get(task)
        if not task.loaded:  # replayed done: its summaries are read on first ask
            task.results, task.loaded = {i: summary(r) for i, r in full.items()}, True
        return full

    def summaries_of(self, task: TaskState) -> dict[int, dict[str, Any]]:
        if not task.loaded:
            self.results_of(task)
        return task.results

    def state_of(self, task: TaskState) -> str:
        if task.done:
            return task.record.state
        if task.record.cancelled:
            return "cancelling"
        return "running" if task.results or any(s != "queued" for s in task.stages.values()) else "queued"

    def result(self, task_id: str, *, sessions: bool = True) -> dict[str, Any]:
        task = self.get(task_id)
        payload = task_result(
            task_id,
            self.state_of(task),
            task.request["num_samples"],
            self.results_of(task) if sessions else self.summaries_of(task),
            metadata=task.request.get("metadata") or {},
            submitted_at=task.record.submitted_at,
            finished_at=task.record.done_at,
            include_sessions=sessions,
        )
        payload["sessions_in_flight"] = dict(Counter(task.stages.values()))
        payload["callback"] = {
            "url": task.request.get("callback_url"),
            "delivered": task.record.delivered,
            "attempts": task.record.delivery_attempts,
            "error": task.record.delivery_error,
        }
        return payload

    async def wait(self, task_id: str, timeout: float) -> dict[str, Any]:
        """The task's result once it is done, or as it stands after ``timeout`` seconds."""
        task = self.get(task_id)
        deadline = asyncio.get_running_loop().time() + timeout
        while not task.done:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            try:
                await asyncio.wait_for(task.changed.wait(), left)
            except TimeoutError:
                break
        return self.result(task_id)

    # ---- events ---------------------------------------------------------------------------------------------------

    def _seen(self, job: SessionJob, stage: str) -> None:
        task = self.tasks.get(job.task_id)
        if task is None or job.index in task.results:
            return
        self._event(task, job.index, stage, attempt=job.attempt)

    def _event(self, task: TaskState, index: int | None, state: str, **extra: Any) -> None:
        if index is not None and state in ("queued", "retry", "init", "ready", "running", "postrun"):
            task.stages[index] = "queued" if state == "retry" else state
        event = {"id": len(task.events) + 1, "t": round(time.time(), 3), "task_id": task.record.task_id}
        event.update(sample=index, state=state, **extra)
        task.events.append(event)
        changed, task.changed = task.changed, asyncio.Event()
        changed.set()

    async def events(
        self, task_id: str, after: int = 0, *, heartbeat: float | None = None
    ) -> AsyncIterator[dict[str, Any] | None]:
        """Every event of the task after ``after``, then the new ones as they come, until the task is done; None
        after each ``heartbeat`` seconds without one."""
        task = self.get(task_id)
        sent = after
        while True:
            while sent < len(task.events):
                sent += 1
                yield task.events[sent - 1]
            if task.done or self._closing:
                return
            try:
                await asyncio.wait_for(task.changed.wait(), heartbeat)
            except TimeoutError:
                yield None

    # ---- control --------------------------------------------------------------------------------------------------

    async def pause(self, mode: str) -> dict[str, Any]:
        gate = self.node.gate
        if gate is None:
            raise TaskError("mode", "this node has no gateway to pause")
        self.paused = mode
        affected = await gate.pause(mode)
        return {"paused": True, "mode": mode, "calls": affected}

    async def resume(self) -> dict[str, Any]:
        if self.node.gate is not None:
            await _maybe(self.node.gate.resume())
        self.paused = None
        return {"paused": False}

    async def set_weights(self, version: str) -> dict[str, Any]:
        self.journal.set_weights(version)
        if self.node.gate is not None:
            await _maybe(self.node.gate.set_weight_version(version))
        return {"weight_version": version}

    def status(self) -> dict[str, Any]:
        sessions: Counter[str] = Counter()
        states: Counter[str] = Counter()
        for task in self.tasks.values():
            sessions.update(task.stages.values())
            states[self.state_of(task)] += 1
        snap = self.pools.snapshot() if self.pools is not None else None
        gate = self.node.gate
        return {
            "node": self.node.info(),
            "uptime_seconds": round(time.time() - self.started_at, 1),
            "paused": self.paused,
            "weight_version": self.journal.weight_version,
            "gate": gate.status() if gate is not None else None,
            "queue": {"depth": len(self.queue), "by_priority": self.queue.depths()},
            "pools": {
                "limits": {k: getattr(self.node.limits, k) for k in ("init", "run", "postrun", "ready")},
                "init": snap.init if snap else 0,
                "ready": snap.ready if snap else 0,
                "running": snap.running if snap else 0,
                "postrun": snap.postrun if snap else 0,
            },
            "sessions": dict(sessions),
            "tasks": dict(states),
            "deliveries": {
                "pending": len(self.deliveries.pending),
                "delivered": self.deliveries.delivered,
                "retrying": dict(self.deliveries.errors),
                "failed": dict(self.deliveries.failed),
            },
        }


async def _maybe(result: Any) -> None:
    """Await what a gate returned when it is awaitable (a fleet's gate), else nothing."""
    if inspect.isawaitable(result):
        await result
