"""The harness session's steps (`harness.session`) on the node's executor threads, one awaitable per stage pool.

The runtime's calls block, so each step runs on an executor thread. A step whose awaiting task is cancelled (Ctrl-C)
cannot stop its thread; `in_thread` then cleans up what the thread returns once it ends (a container that finished
starting after the session was cancelled is removed, not leaked). `Ahead` begins a step that a later one will want
(the grading container, started at the end of INIT for POSTRUN) and drops its result if nobody takes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from polar_cli.capture import CaptureRecord
from polar_cli.harness import session
from polar_cli.harness.base import Wiring
from polar_cli.harness.session import Collected, HarnessRun, Prepared, SessionSpec
from polar_cli.runtime.base import Runtime

if TYPE_CHECKING:
    from polar_cli.node.gateway import NodeGateway

log = logging.getLogger("polar.node")
X = TypeVar("X")


def runtime_threads(init: int, run: int, postrun: int) -> int:
    """The threads a node's runtime calls need: one for each INIT, RUN and POSTRUN in flight, one more for each INIT's
    grading container starting behind it (an `Ahead` taken at POSTRUN), and two for the odd call between."""
    return 2 * init + run + postrun + 2


async def in_thread(executor: Executor, fn: Callable[[], X], on_abandon: Callable[[X], None] | None = None) -> X:
    """``fn()`` on ``executor``; if the caller is cancelled, ``on_abandon(result)`` runs when ``fn`` returns."""
    future: Future[X] = executor.submit(fn)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        if on_abandon is not None:
            callback = on_abandon

            def cleanup(done: Future[X]) -> None:
                if not done.cancelled() and done.exception() is None:
                    try:
                        callback(done.result())
                    except Exception:
                        log.exception("cleaning up after a cancelled step failed")

            future.add_done_callback(cleanup)
        raise


class Ahead(Generic[X]):
    """``start()`` begun on ``executor`` now, for a step that wants its result later: `take` hands it over (None when
    starting failed: the step does the work itself, and its own failure says why); `release` drops one never taken
    with ``drop``, at once if it is there, else once it is (a start under way is not left behind)."""

    def __init__(self, executor: Executor, start: Callable[[], X | None], drop: Callable[[X], None]) -> None:
        def dropped(result: X | None) -> None:
            if result is not None:
                drop(result)

        self._drop = dropped
        self._task = asyncio.ensure_future(in_thread(executor, start, on_abandon=dropped))
        self._taken = False

    async def take(self) -> X | None:
        self._taken = True
        try:
            return await self._task
        except Exception as exc:
            log.debug("starting ahead failed (%s); the step does it itself", exc)
            return None

    def release(self) -> None:
        if self._taken:
            return
        self._taken = True
        if not self._task.done():
            self._task.cancel()  # `in_thread` drops what the thread returns once it ends
        elif not self._task.cancelled() and self._task.exception() is None:
            self._drop(self._task.result())


class SessionSteps:
    """Sessions on one runtime, step by step: prepare (INIT), run (RUN), finish (POSTRUN), discard (cancelled)."""

    def __init__(self, runtime: Runtime, executor: Executor) -> None:
        self.runtime = runtime
        self.executor = executor

    async def prepare(self, spec: SessionSpec, wiring: Wiring) -> Prepared:
        return await in_thread(
            self.executor, lambda: session.prepare(self.runtime, spec, wiring), on_abandon=session.discard
        )

    async def run(
        self,
        prepared: Prepared,
        deadline: float,
        agent_timeout: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> HarnessRun:
        """Run the harness until it exits or ``deadline`` / ``agent_timeout`` passes, both on ``clock``."""
        left = deadline - clock()
        timeout = min(left, agent_timeout) if agent_timeout else left
        return await in_thread(self.executor, lambda: session.run(prepared, timeout, clock))

    async def finish(self, prepared: Prepared, artifacts_dir: Path | None, output: bytes | None) -> Collected:
        return await in_thread(self.executor, lambda: session.finish(prepared, artifacts_dir, output))

    async def discard(self, prepared: Prepared) -> None:
        await in_thread(self.executor, lambda: session.discard(prepared))

    async def conclude(
        self, gateway: NodeGateway, key: str, prepared: Prepared, artifacts_dir: Path | None, run: HarnessRun | None
    ) -> tuple[Collected, list[CaptureRecord]]:
        """POSTRUN's first half, the same for every kind of run: collect and remove the container, close the gateway
        session (whatever collecting did), read its capture records back."""
        try:
            collected = await self.finish(prepared, artifacts_dir, run.output if run is not None else None)
        finally:
            gateway.close_session(key)
        records = await in_thread(self.executor, lambda: gateway.records(prepared.spec.session_id))
        return collected, records
