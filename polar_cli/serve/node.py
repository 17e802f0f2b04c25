"""The gateway node the service drives: the engine, the gateway, the Docker runtime and the stage functions of one
machine (`LocalNode`), behind a small seam (`Node`) so a simulation can stand in for it (tests, `bench_serve.py`).

The node holds no task state: it is handed sessions (`serve.stages.SessionJob`) and yields their outputs.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from polar_cli.node.pools import PoolLimits, StagePools, Stages
from polar_cli.serve.config import ServeConfig
from polar_cli.serve.results import SessionOutput
from polar_cli.serve.stages import ServeSession, SessionJob

log = logging.getLogger("polar.serve")

Cancelled = Callable[[SessionJob], str | None]


class Gate(Protocol):
    """The gateway's model-call gate (`gateway.pause.ModelCallGate`): weight syncs."""

    async def pause(self, mode: Any, timeout: float | None = None) -> int: ...

    def resume(self) -> Any: ...

    def set_weight_version(self, version: str | None) -> Any:
        """None, or an awaitable (a fleet's gate tells every node)."""
        ...

    def status(self) -> dict[str, Any]: ...


class Node(Protocol):
    node_id: str
    limits: PoolLimits

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def stages(self, cancelled: Cancelled) -> Stages[SessionJob, Any, SessionOutput]: ...

    def attach(self, pools: StagePools[SessionJob, Any, SessionOutput]) -> None:
        """The service's pools (a fleet resizes them as nodes join and die)."""
        ...

    def job_timeout(self, session_timeout: float) -> float:
        """The pools' deadline for a session whose own timeout is ``session_timeout``."""
        ...

    # optional: ``deadline_clock() -> float``, the clock session deadlines run on (one that stands still while the
    # gateway is paused credits the pause to every session's timeout); without it, `time.monotonic`

    @property
    def gate(self) -> Gate | None: ...

    def info(self) -> dict[str, Any]: ...


def default_node_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class LocalNode:
    """This machine's engine, gateway and Docker runtime (the same parts a generate run starts, `generate.run`)."""

    def __init__(self, config: ServeConfig, state_dir: Path) -> None:
        c = config.concurrency
        self.config = config
        self.state_dir = state_dir
        self.node_id = config.service.node_id or default_node_id()
        self.limits = PoolLimits(init=c.init, run=c.run, postrun=c.postrun, ready=c.ready)
        self._docker_pool = ThreadPoolExecutor(c.init + c.run + c.postrun + 2, thread_name_prefix="polar-node")
        self._engine_pool = ThreadPoolExecutor(2, thread_name_prefix="polar-engine")
        self._runtime: Any = None
        self._engine: Any = None
        self._gateway: Any = None
        self._retired: dict[str, str] = {}  # engine URL -> why a weight load took it out of rotation

    async def start(self) -> None:
        from polar_cli.harness.session import mount_bundle
        from polar_cli.inference.engines import open_engine
        from polar_cli.node.gateway import NodeGateway
        from polar_cli.node.session_steps import in_thread
        from polar_cli.runtime.docker import DockerRuntime

        runtime = self._runtime = await in_thread(self._docker_pool, DockerRuntime)
        swept = await in_thread(self._docker_pool, runtime.sweep)
        if swept:
            log.info("removed %d container(s) left behind by a dead process", swept)
        build = self.config.runtime.build_images
        for adapter in self.config.adapters().values():
            await in_thread(self._docker_pool, partial(mount_bundle, runtime, adapter, build=build, log=log.info))
        self._engine = await open_engine(self.config.engine, self.state_dir, executor=self._engine_pool)
        rt = self.config.runtime
        self._gateway = NodeGateway(self._engine, self.state_dir / "capture", host=rt.gateway_host, url=rt.gateway_url)
        await self._gateway.start()

    def stages(self, cancelled: Cancelled) -> Stages[SessionJob, ServeSession, SessionOutput]:
        from polar_cli.node.session_steps import SessionSteps
        from polar_cli.serve.stages import ServeStages

        assert self._gateway is not None, "start the node first"
        return ServeStages(
            steps=SessionSteps(self._runtime, self._docker_pool),
            gateway=self._gateway,
            state_dir=self.state_dir,
            eval_settings=self.config.eval,
            eval_timeout=self.config.timeouts.eval,
            build_images=self.config.runtime.build_images,
            name=self.config.name,
            eot_token_id=self.config.builder.eot_token_id
            if self.config.builder.eot_token_id is not None
            else self._engine.eot_token_id,
            cancelled=cancelled,
            egress=self.config.runtime.egress.allowlist(),
        )

    @property
    def gate(self) -> Gate | None:
        return self._gateway.gate if self._gateway is not None else None

    def attach(self, pools: StagePools[SessionJob, Any, SessionOutput]) -> None:
        return None

    def job_timeout(self, session_timeout: float) -> float:
        return session_timeout

    def deadline_clock(self) -> float:
        """`time.monotonic`, stopped while the gateway is paused (`gateway.pause.ModelCallGate.credited_clock`)."""
        assert self._gateway is not None, "start the node first"
        return float(self._gateway.gate.credited_clock())

    def engines(self) -> list[dict[str, Any]]:
        """Each engine server this node drives: its URL, kind, model, the weight version stamped on its calls, and
        whether it is in rotation (a failed weight load takes it out, `serve.weights`)."""
        from polar_cli.inference.control import engine_urls

        if self._engine is None:
            return []
        version = self._gateway.gate.weight_version if self._gateway is not None else None
        return [
            {"node_id": self.node_id, "url": url, "kind": self.config.engine.kind, "model": self._engine.model}
            | {"weight_version": version, "in_rotation": url not in self._retired, "retired": self._retired.get(url)}
            for url in engine_urls(self._engine)
        ]

    def weight_targets(self) -> Any:
        """The engine servers in rotation a weight sync loads (`serve.weights.WeightTargets`)."""
        from polar_cli.inference.control import engine_urls
        from polar_cli.inference.servers import server_control
        from polar_cli.serve.weights import WeightTargets

        if self._engine is None:
            return None
        control = server_control(self.config.engine.kind, self.config.engine.dialect)
        urls = [u for u in engine_urls(self._engine) if u not in self._retired]
        return WeightTargets(control, self._engine.model, urls, self._retire)

    def _retire(self, url: str, reason: str) -> None:
        self._retired[url] = reason
        if self._engine is not None and self._engine.pool is not None:
            self._engine.pool.retire(url, reason)

    def info(self) -> dict[str, Any]:
        return {
            "node_id": self.node_id,
            "engine": self.config.engine.kind,
            "model": self._engine.model if self._engine is not None else None,
            "gateway": self._gateway.url if self._gateway is not None else None,
        }

    async def stop(self) -> None:
        try:
            if self._gateway is not None:
                await self._gateway.stop()
        finally:
            try:
                if self._engine is not None:
                    await self._engine.close()
            finally:
                if self._runtime is not None:
                    self._runtime.close()
                self._docker_pool.shutdown(wait=True, cancel_futures=True)
                self._engine_pool.shutdown(wait=True, cancel_futures=True)
