"""What a `polar generate` run watches while its sessions run: the inference server and the Docker engine.

Each is a `node.health.Watch` on the run's `Outages` gate. The engine down: the sessions in RUN end as errors (their
harnesses could only fail), sessions in READY wait; a launched server is restarted with backoff (``engine.restarts``),
a server given by URL is waited for (``engine.down_timeout``). Docker down: every session in flight ends as an error
(its container is gone or unreachable); once the engine answers again the run waits for those sessions to leave
POSTRUN, removes every container it still holds, and goes on (``runtime.docker_wait``). A session an outage cut short
is run again in the same run (`Requeue`, at most ``runtime.outage_retries`` times).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from polar_cli.config import EngineConfig, Recipe
from polar_cli.inference.engines import EngineHandle
from polar_cli.node.health import Check, Gone, Outages, Watch, restart_with_backoff
from polar_cli.node.liveness import EngineLiveness
from polar_cli.node.pools import Job, StagePools
from polar_cli.runtime.base import Runtime

log = logging.getLogger("polar.generate")
SETTLE_TIMEOUT = 300.0


class Requeue:
    """Which finished sessions to run again: errors of sessions an outage cut short. Those in flight when it was
    declared end after it; those that failed as it began (before the watch could tell) are found when it is
    declared, by the time they ended. Each key at most ``retries`` times per run."""

    def __init__(
        self, outages: Outages, retries: int, window: float = 0.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.outages = outages
        self.retries = retries
        # how long after an error an outage may still be declared that explains it (the watches' detection time)
        self.window = window
        self.clock = clock
        self.started: dict[str, int] = {}
        self.tries: Counter[str] = Counter()
        # errors not rerun (yet): (when it ended, the job)
        self.errors: list[tuple[float, Job[Any]]] = []
        self.rerun: Callable[[Job[Any]], None] | None = None
        outages.on_outage = self.outage_began

    def started_session(self, key: str) -> None:
        self.started[key] = self.outages.epoch

    def finished(self, job: Job[Any], kind: str) -> bool:
        """A session's row was written; True when it is to run again now."""
        if kind != "error":
            return False
        hit = self.outages.epoch > self.started.get(job.key, self.outages.epoch) or not self.outages.open()
        if hit and self._take(job.key):
            return True
        self.errors.append((self.clock(), job))
        return False

    def hold(self) -> bool:
        """Whether an error is recent enough that an outage may yet be declared for it (the run must not end)."""
        now = self.clock()
        return any(now - ended < self.window for ended, _ in self.errors)

    def outage_began(self, since: float) -> None:
        """Rerun the errors that ended since the outage's failing began."""
        keep: list[tuple[float, Job[Any]]] = []
        for ended, job in self.errors:
            if ended >= since and self._take(job.key) and self.rerun is not None:
                log.info("session %s: failed as the outage began; it runs again", job.key)
                self.rerun(job)
            else:
                keep.append((ended, job))
        self.errors = keep

    def _take(self, key: str) -> bool:
        if self.tries[key] >= self.retries:
            return False
        self.tries[key] += 1
        return True


def detection_window(recipe: Recipe) -> float:
    """Seconds from a dependency's death to its outage being declared, at most: a check interval, the failed checks
    in a row a watch needs (the engine's ``health_failures``, Docker's two), the last check's timeout."""
    e = recipe.engine
    return e.health_interval * (max(e.health_failures, 2) + 1) + e.health_timeout


def engine_watch(
    engine: EngineHandle, recipe: Recipe, run_dir: Path, outages: Outages, pools: StagePools[Any, Any, Any]
) -> Watch | None:
    if not EngineLiveness.watched(engine):
        return None
    config = recipe.engine
    liveness = EngineLiveness(engine, config, run_dir / "logs" / "sglang.log", timeout=config.health_timeout)
    check: Check = liveness.check
    if engine.pool is not None:
        check = _workers_check(engine, config, run_dir)

    async def on_down(reason: str) -> None:
        n = pools.abort(f"the inference server went down ({reason})")
        log.warning("engine down: %d running session(s) ended as errors, to run again", n)

    async def recover() -> str:
        return await restart_with_backoff(
            "the launched server", liveness.restart, attempts=liveness.restarts_left, backoff=config.restart_backoff
        )

    watch = Watch(
        "the inference server",
        check,
        outages,
        interval=config.health_interval,
        failures=config.health_failures,
        give_up_after=config.down_timeout,
        recover=recover if liveness.can_restart() else None,
        on_down=on_down,
    )
    return watch


def _workers_check(engine: EngineHandle, config: EngineConfig, run_dir: Path) -> Check:
    """``engine.urls``: every worker is checked (its own `EngineLiveness`, ``GET /health``), and the engine is down when
    ANY worker is down. Chosen over "down when all are": the sessions bound to a dead worker can only fail (they are
    never moved to another: gateway.upstream_pool), and an outage ends the running sessions as errors that run again
    once every worker answers, while the run waits ``engine.down_timeout`` for the dead one, as for a single url. The
    cost: the sessions on the healthy workers are cut short too."""
    assert engine.pool is not None
    workers = [
        EngineLiveness(
            replace(engine, upstream=worker.client, server=None),
            config,
            run_dir / "logs" / "sglang.log",
            timeout=config.health_timeout,
        )
        for worker in engine.pool.workers
    ]

    async def check() -> str | None:
        found = await asyncio.gather(*(w.check() for w in workers))
        down = [
            f"{w.url}: {r.reason if isinstance(r, Gone) else r}"
            for w, r in zip(workers, found, strict=True)
            if r is not None
        ]
        return f"{len(down)} of {len(workers)} servers down: " + "; ".join(down) if down else None

    return check


def docker_watch(runtime: Runtime, recipe: Recipe, outages: Outages, pools: StagePools[Any, Any, Any]) -> Watch | None:
    ping = getattr(runtime, "ping", None)
    if ping is None:
        return None

    async def check() -> str | Gone | None:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(30.0):
                await loop.run_in_executor(None, ping)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return None

    async def on_down(reason: str) -> None:
        n = pools.abort(f"the Docker engine stopped answering ({reason})", ready=True)
        log.warning("Docker down: %d session(s) ended as errors, to run again", n)

    async def on_up() -> None:
        start = time.monotonic()
        while pools.in_flight() and time.monotonic() - start < SETTLE_TIMEOUT:
            await asyncio.sleep(0.5)
        live, remove = getattr(runtime, "live", None), getattr(runtime, "remove", None)
        if live is None or remove is None:
            return
        left: list[str] = live()
        for container_id in left:
            with contextlib.suppress(Exception):
                await asyncio.get_running_loop().run_in_executor(None, remove, container_id)
        if left:
            log.warning("Docker back: removed %d container(s) the outage left behind", len(left))

    return Watch(
        "the Docker engine",
        check,
        outages,
        interval=recipe.engine.health_interval,
        failures=2,
        give_up_after=recipe.runtime.docker_wait,
        on_down=on_down,
        on_up=on_up,
    )
