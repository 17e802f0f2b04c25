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
from pathlib import Path
from typing import Any

from polar_cli.config import Recipe
from polar_cli.inference.engines import EngineHandle
from polar_cli.inference.liveness import EngineLiveness
from polar_cli.node.health import Gone, Outages, Watch, restart_with_backoff
from polar_cli.node.pools import StagePools
from polar_cli.runtime.base import Runtime

log = logging.getLogger("polar.generate")
SETTLE_TIMEOUT = 300.0


class Requeue:
    """Which finished sessions to run again: errors of sessions that were in flight during an outage."""

    def __init__(self, outages: Outages, retries: int) -> None:
        self.outages = outages
        self.retries = retries
        self.started: dict[str, int] = {}
        self.tries: Counter[str] = Counter()

    def started_session(self, key: str) -> None:
        self.started[key] = self.outages.epoch

    def should_rerun(self, key: str, kind: str) -> bool:
        hit = self.outages.epoch > self.started.get(key, self.outages.epoch) or not self.outages.open()
        if kind != "error" or not hit or self.tries[key] >= self.retries:
            return False
        self.tries[key] += 1
        return True


def engine_watch(
    engine: EngineHandle, recipe: Recipe, run_dir: Path, outages: Outages, pools: StagePools[Any, Any, Any]
) -> Watch | None:
    if not EngineLiveness.watched(engine):
        return None
    config = recipe.engine
    liveness = EngineLiveness(engine, config, run_dir / "logs" / "sglang.log", timeout=config.health_timeout)

    async def on_down(reason: str) -> None:
        n = pools.abort(f"the inference server went down ({reason})")
        log.warning("engine down: %d running session(s) ended as errors, to run again", n)

    async def recover() -> str:
        return await restart_with_backoff(
            "the launched server", liveness.restart, attempts=liveness.restarts_left, backoff=config.restart_backoff
        )

    watch = Watch(
        "the inference server",
        liveness.check,
        outages,
        interval=config.health_interval,
        failures=config.health_failures,
        give_up_after=config.down_timeout,
        recover=recover if liveness.can_restart() else None,
        on_down=on_down,
    )
    return watch


def docker_watch(
    runtime: Runtime, recipe: Recipe, outages: Outages, pools: StagePools[Any, Any, Any], interval: float = 5.0
) -> Watch | None:
    ping = getattr(runtime, "ping", None)
    if ping is None:
        return None

    async def check() -> str | Gone | None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(loop.run_in_executor(None, ping), timeout=30.0)
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
        interval=interval,
        failures=2,
        give_up_after=recipe.runtime.docker_wait,
        on_down=on_down,
        on_up=on_up,
    )
