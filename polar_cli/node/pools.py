"""Stage pools: sessions flow INIT -> READY -> RUN -> POSTRUN, each stage with its own bound, in one event loop.

The stage functions are injected (`Stages`), so the same scheduler drives Docker containers in `polar generate` and
sleeps in the tests and the benchmark. Every transition happens in `StagePools._advance`, synchronously, so these
rules hold at every point another coroutine can observe:

- Rule 1, READY feeds RUN first: while a RUN slot is free and READY holds a prepared session, it starts running. A RUN
  slot is never idle while READY is not empty (the GPUs wait for nothing that is ready).
- Rule 2, the READY buffer bounds how far INIT runs ahead: a new INIT starts only while sessions in INIT, READY and
  RUN number fewer than RUN slots + READY size. With every RUN slot busy, READY plus INIT in flight stays within the
  buffer; with a buffer of 0 a RUN slot is reserved before INIT starts (the naive pipeline, for comparison).
- Rule 3, POSTRUN never blocks RUN: a session leaving RUN frees its slot at once and queues for a POSTRUN worker.
- Rule 4, backpressure from POSTRUN: while more sessions wait for a POSTRUN worker than there are workers, no new
  INIT starts (a waiting session still holds its container; grading that cannot keep up must not pile them up).

The session timeout starts when INIT starts and covers READY and RUN. INIT past the deadline, a READY wait past it,
or a run stage that overruns it (plus a grace: stage functions enforce the deadline themselves, the pool only backs
them up) end the session with reason ``timeout``; POSTRUN always runs, so a partial session keeps what it made.
Cancelling `StagePools.run` (Ctrl-C) cancels every stage task and hands initialised sessions to `Stages.discard`.

An outage (`node.health`) closes the ``gate``, and ``hold`` keeps the run from ending while errors just written
may yet turn out to be an outage's: while it is closed no INIT starts and READY feeds no RUN slot.
Rule 5, no session is lost after RUN: a POSTRUN that raises or runs past ``postrun_timeout``, or a result callback
that raises, gives the session the error result ``failed`` makes, naming the stage and the exception (a generate
error row, retried; a serve error, retried then masked). An exception in ``fatal`` (a full disk) stops the run.

`StagePools.abort` ends the sessions in RUN (and, with ``ready``, those waiting in READY) with reason ``run_error``
and sends them through POSTRUN, so they are rows (errors) and free their slots; `StagePools.requeue` puts a job back
at the head of the queue, to be run again once the gate opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

log = logging.getLogger("polar.node")

T = TypeVar("T")
S = TypeVar("S")  # what INIT made ready: a pooled session (a started container and its launch, in generate)
O = TypeVar("O")  # noqa: E741
O_co = TypeVar("O_co", covariant=True)
EndReason = Literal["ok", "timeout", "init_error", "run_error"]
# what the pools tell a stage failure by: "POSTRUN raised ValueError: ...", "the result callback raised ..."
FailureReason = str
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Job(Generic[T]):
    """One session to run: a stable key, what the stages need, and its timeout (seconds from INIT start)."""

    key: str
    payload: T
    timeout: float


@dataclass(slots=True)
class Timings:
    """Seconds spent in each stage (POSTRUN's own parts, like eval, are the stage's business)."""

    init: float = 0.0
    ready_wait: float = 0.0
    run: float = 0.0
    postrun: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return {k: round(getattr(self, k), 3) for k in ("init", "ready_wait", "run", "postrun")}


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How a session left INIT / READY / RUN: ``value`` is what the run stage returned (None if it did not finish)."""

    reason: EndReason
    value: Any = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class PoolLimits:
    init: int
    run: int
    postrun: int
    ready: int

    def __post_init__(self) -> None:
        if min(self.init, self.run, self.postrun) < 1 or self.ready < 0:
            raise ValueError(f"pool limits must be >= 1 (ready >= 0): {self}")


class Stages(Protocol[T, S, O_co]):
    async def init(self, job: Job[T], deadline: float) -> S:
        """Make the session ready to run; ``deadline`` is on the pool's clock."""
        ...

    async def run(self, job: Job[T], session: S, deadline: float) -> Any:
        """Run the agent; must stop by ``deadline`` (the pool cancels it a grace period later)."""
        ...

    async def postrun(self, job: Job[T], session: S | None, end: RunEnd, timings: Timings) -> O_co:
        """Collect, grade, write and clean up; ``session`` is None when INIT failed."""
        ...

    async def discard(self, job: Job[T], session: S) -> None:
        """Clean up a session that was cancelled before POSTRUN."""
        ...


@dataclass(frozen=True, slots=True)
class Snapshot:
    queued_done: bool
    init: int
    ready: int
    running: int
    postrun: int
    finished: int
    failed: int
    run_started: int  # sessions that have entered RUN so far


@dataclass(slots=True)
class _InFlight(Generic[T, S]):
    job: Job[T]
    started: float = 0.0
    deadline: float = 0.0
    session: S | None = None
    end: RunEnd | None = None
    timings: Timings = field(default_factory=Timings)
    mark: float = 0.0  # when the current stage began
    # set by `StagePools.abort` before it cancels the session's RUN task: why it was cut short
    aborted: str | None = None
    task: asyncio.Task[None] | None = None


class StagePools(Generic[T, S, O]):
    """Runs jobs through the stages under `PoolLimits`; results go to ``on_result`` as each session finishes."""

    def __init__(
        self,
        stages: Stages[T, S, O],
        limits: PoolLimits,
        on_result: Callable[[Job[T], O, Timings], None],
        *,
        on_change: Callable[[Snapshot], None] | None = None,
        clock: Clock = time.monotonic,
        deadline_clock: Clock | None = None,
        run_grace: float = 30.0,
        gate: Callable[[], bool] | None = None,
        hold: Callable[[], bool] | None = None,
        fatal: tuple[type[BaseException], ...] = (),
        failed: Callable[[Job[T], S | None, RunEnd, Timings, FailureReason], O] | None = None,
        postrun_timeout: float | None = None,
    ) -> None:
        self.stages = stages
        self.limits = limits
        self.on_result = on_result
        self.on_change = on_change
        self.clock = clock
        # the clock session deadlines run on (default ``clock``): one that stops while the gateway is paused for a
        # weight sync credits the pause to every session's timeout (`gateway.pause.ModelCallGate.credited_clock`)
        self.deadline_clock = deadline_clock or clock
        self._follow = deadline_clock is not None
        self.run_grace = run_grace
        self.gate = gate or (lambda: True)
        # while True, the run does not end even with nothing left to do (errors that an outage may yet explain)
        self.hold = hold or (lambda: False)
        # exceptions of POSTRUN (or of ``on_result``) that stop the whole run (a full disk): `run` raises the first
        self.fatal = fatal
        self._fatal: BaseException | None = None
        # Rule 5: a session whose POSTRUN or result callback raised (or whose POSTRUN ran past ``postrun_timeout``)
        # still gets a result, ``failed``'s error naming the stage and the exception; None: it is only logged
        self.failed_result = failed
        self.postrun_timeout = postrun_timeout
        self._retry: deque[Job[T]] = deque()
        self._in_run: dict[int, _InFlight[T, S]] = {}
        self._jobs: Iterator[Job[T]] = iter(())
        self._jobs_done = False
        self._init = 0
        self._ready: deque[_InFlight[T, S]] = deque()
        self._running = 0
        self._post = 0
        self._post_queue: deque[_InFlight[T, S]] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self._held: dict[int, _InFlight[T, S]] = {}  # sessions that INIT made ready, for cancellation
        self._initialising: list[_InFlight[T, S]] = []  # sessions in INIT, for `cancel`
        self._idle: asyncio.Event | None = None
        self.finished = 0
        self.failed = 0
        self.run_started = 0
        # RUN-slot occupancy: integral of busy slots over time
        self.busy_seconds = 0.0
        self._busy_since = 0.0

    # ---- observation ------------------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return Snapshot(
            self._jobs_done, self._init, len(self._ready), self._running, self._post + len(self._post_queue),
            self.finished, self.failed, self.run_started,
        )  # fmt: skip

    def in_flight(self) -> int:
        """Sessions between the start of INIT and the end of POSTRUN."""
        return self._init + len(self._ready) + self._running + self._post + len(self._post_queue)

    def _account(self) -> None:
        now = self.clock()
        self.busy_seconds += self._running * (now - self._busy_since)
        self._busy_since = now

    # ---- the run ----------------------------------------------------------------------------------------------

    async def run(self, jobs: Iterable[Job[T]]) -> None:
        """Run every job to the end of POSTRUN. Cancelled: every stage task is cancelled, ready sessions discarded."""
        self._jobs = iter(jobs)
        self._idle = asyncio.Event()
        self._busy_since = self.clock()
        self._advance()
        try:
            await self._idle.wait()
        finally:
            await self._cancel_all()
        if self._fatal is not None:
            raise self._fatal

    def kick(self) -> None:
        """Dispatch again (the gate opened)."""
        if self._idle is not None:
            self._advance()

    def requeue(self, job: Job[T]) -> None:
        """Run ``job`` again, before any job not yet started (call from ``on_result`` or the event loop)."""
        self._retry.append(job)
        self._jobs_done = False
        if self._idle is not None:
            self._advance()

    def feed(self) -> None:
        """More jobs may have come (a long-lived source such as the rollout service's queue): ask it again."""
        self._jobs_done = False
        if self._idle is not None:
            self._advance()

    def abort(self, reason: str, *, ready: bool = False) -> int:
        """End every session in RUN (and in READY, with ``ready``) as ``run_error: reason``; returns how many."""
        return self.cancel(lambda job: True, reason, ready=ready, init=False)

    def cancel(self, match: Callable[[Job[T]], bool], reason: str, *, ready: bool = True, init: bool = True) -> int:
        """End the sessions of the jobs ``match`` picks as ``run_error: reason``, each through POSTRUN (its
        container is collected and removed): those in RUN are cancelled, those in READY (``ready``) go straight to
        POSTRUN, those in INIT (``init``) go there once INIT returns, and those queued for a retry are dropped.
        Returns how many sessions it ended or marked."""
        n = 0
        for s in list(self._in_run.values()):
            if s.task is not None and s.aborted is None and match(s.job):
                s.aborted = reason
                s.task.cancel()
                n += 1
        if ready:
            keep: deque[_InFlight[T, S]] = deque()
            for s in self._ready:
                if match(s.job):
                    s.end = RunEnd("run_error", error=reason)
                    self._post_queue.append(s)
                    n += 1
                else:
                    keep.append(s)
            self._ready = keep
        if init:
            for s in self._initialising:
                if s.aborted is None and match(s.job):
                    s.aborted = reason
                    n += 1
            before = len(self._retry)
            self._retry = deque(j for j in self._retry if not match(j))
            n += before - len(self._retry)
        if n:
            self._advance()
        return n

    def _next_job(self) -> Job[T] | None:
        if self._retry:
            return self._retry.popleft()
        return next(self._jobs, None)

    def _advance(self) -> None:
        self._account()
        gate = self.gate()
        # Rule 1: READY feeds free RUN slots before anything else happens
        while gate and self._ready and self._running < self.limits.run:
            s = self._ready.popleft()
            s.task = self._start(self._run(s))
            self._running += 1
            self.run_started += 1
        # Rule 3: POSTRUN has its own workers
        while self._post_queue and self._post < self.limits.postrun:
            self._start(self._postrun(self._post_queue.popleft()))
            self._post += 1
        # Rule 2: INIT runs ahead only as far as the READY buffer allows; Rule 4: nor while POSTRUN is backed up
        while (
            gate
            and not self._jobs_done
            and self._init < self.limits.init
            and len(self._post_queue) <= self.limits.postrun
            and self._init + len(self._ready) + self._running < self.limits.run + self.limits.ready
        ):
            job = self._next_job()
            if job is None:
                self._jobs_done = True
                break
            self._start(self._init_stage(_InFlight(job)))
            self._init += 1
        if self.on_change is not None:
            self.on_change(self.snapshot())
        idle = not (self._init or self._ready or self._running or self._post or self._post_queue)
        if self._jobs_done and idle and self._idle is not None and not self.hold():
            self._idle.set()

    def _start(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @contextlib.asynccontextmanager
    async def _until(self, deadline: float) -> AsyncIterator[None]:
        """`asyncio.timeout` at ``deadline`` on the deadline clock, which may stand still (re-aimed each second)."""
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(max(0.0, deadline - self.deadline_clock())) as scope:
            if not self._follow:
                yield
                return

            async def follow() -> None:
                while not scope.expired():
                    await asyncio.sleep(1.0)
                    if not scope.expired():
                        scope.reschedule(loop.time() + max(0.0, deadline - self.deadline_clock()))

            watcher = loop.create_task(follow())
            try:
                yield
            finally:
                watcher.cancel()

    async def _init_stage(self, s: _InFlight[T, S]) -> None:
        s.started = s.mark = self.clock()
        s.deadline = self.deadline_clock() + s.job.timeout
        self._initialising.append(s)
        try:
            async with self._until(s.deadline):
                s.session = await self.stages.init(s.job, s.deadline)
            self._held[id(s)] = s
            if s.aborted is not None:  # `cancel` while it was in INIT: straight to POSTRUN
                s.end = RunEnd("run_error", error=s.aborted)
        except TimeoutError:
            s.end = RunEnd("timeout", error=f"INIT did not finish within the {s.job.timeout:g} s session timeout")
        except Exception as exc:
            log.warning("session %s: INIT failed: %s", s.job.key, exc)
            s.end = RunEnd("init_error", error=str(exc) or type(exc).__name__)
        finally:
            self._init -= 1
            self._initialising.remove(s)
        now = self.clock()
        s.timings.init, s.mark = now - s.mark, now
        (self._ready if s.end is None else self._post_queue).append(s)
        self._advance()

    async def _run(self, s: _InFlight[T, S]) -> None:
        now = self.clock()
        s.timings.ready_wait, s.mark = now - s.mark, now
        self._in_run[id(s)] = s
        try:
            left = s.deadline - self.deadline_clock()
            if left <= 0:
                s.end = RunEnd("timeout", error="the session timeout passed while it waited in READY")
            else:
                async with self._until(s.deadline + self.run_grace):
                    value = await self.stages.run(s.job, s.session, s.deadline)  # type: ignore[arg-type]
                s.end = RunEnd("ok", value)
        except TimeoutError:
            s.end = RunEnd("timeout", error=f"RUN overran the {s.job.timeout:g} s session timeout")
        except Exception as exc:
            log.warning("session %s: RUN failed: %s", s.job.key, exc)
            s.end = RunEnd("run_error", error=str(exc) or type(exc).__name__)
        except asyncio.CancelledError:
            if s.aborted is None:
                raise
            # `abort`: the session ends here as an error and still goes through POSTRUN
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            s.end = RunEnd("run_error", error=s.aborted)
        finally:
            self._in_run.pop(id(s), None)
            self._account()
            self._running -= 1
        now = self.clock()
        s.timings.run, s.mark = now - s.mark, now
        self._post_queue.append(s)
        self._advance()

    async def _postrun(self, s: _InFlight[T, S]) -> None:
        try:
            await self._postrun_stage(s)
        finally:
            self._post -= 1
        self._advance()  # not on cancellation: `_cancel_all` starts nothing new

    async def _postrun_stage(self, s: _InFlight[T, S]) -> None:
        s.mark = self.clock()
        assert s.end is not None
        failure: FailureReason | None = None
        try:
            async with asyncio.timeout(self.postrun_timeout):
                result = await self.stages.postrun(s.job, s.session, s.end, s.timings)
        except TimeoutError:
            failure = f"POSTRUN did not finish within {self.postrun_timeout:g} s"
        except Exception as exc:
            if isinstance(exc, self.fatal):
                self._held.pop(id(s), None)
                self._stop(s, "POSTRUN", exc)
                return
            log.exception("session %s: POSTRUN failed", s.job.key)
            failure = f"POSTRUN raised {_described(exc)}"
        # cancelled (Ctrl-C): the session stays held, for `_cancel_all` to discard
        self._held.pop(id(s), None)
        s.timings.postrun = self.clock() - s.mark
        if failure is not None:
            if self.failed_result is None:
                self.failed += 1
                return
            result = self.failed_result(s.job, s.session, s.end, s.timings, failure)
        self._deliver(s, result)

    def _deliver(self, s: _InFlight[T, S], result: O) -> None:
        """Hand ``result`` to ``on_result``; one that raises gets the session's error result instead (Rule 5)."""
        assert s.end is not None
        for last in (False, True):
            try:
                self.on_result(s.job, result, s.timings)
                self.finished += 1
                return
            except Exception as exc:
                if isinstance(exc, self.fatal):
                    self._stop(s, "its result callback", exc)
                    return
                log.exception("session %s: the result callback failed", s.job.key)
                if last or self.failed_result is None:
                    self.failed += 1
                    return
                failure = f"the result callback raised {_described(exc)}"
                result = self.failed_result(s.job, s.session, s.end, s.timings, failure)

    def _stop(self, s: _InFlight[T, S], where: str, exc: BaseException) -> None:
        self.failed += 1
        log.error("session %s: %s failed, the run stops: %s", s.job.key, where, exc)
        if self._fatal is None and self._idle is not None:
            self._fatal = exc
            self._idle.set()

    async def _cancel_all(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        held, self._held = list(self._held.values()), {}
        for s in held:
            if s.session is not None:
                try:
                    await self.stages.discard(s.job, s.session)
                except Exception:
                    log.exception("session %s: discarding it failed", s.job.key)
        self._account()

    def occupancy(self, elapsed: float) -> float:
        """Mean fraction of RUN slots busy over ``elapsed`` seconds."""
        return self.busy_seconds / (self.limits.run * elapsed) if elapsed > 0 else 0.0


def _described(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
