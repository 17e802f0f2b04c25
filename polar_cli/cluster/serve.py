"""`polar serve` on a Ray cluster: the service (journal, queue, results, callbacks) stays in this process; its node is
the fleet (`ClusterNode`, a `serve.node.Node`), whose gateway nodes run the samples with the service's priority
order and the same pressure rule as a cluster generate run (`remote`).

A node lost under a sample ends it as an error (``node_lost: ...``), which the service runs again like any machinery
error (``service.session_retries``); a cancelled sample is cancelled on its node too (its container removed there).
Weight syncs go to every node: the fleet's gate pauses and resumes them all (`FleetGate`), each node loads the
checkpoint into the engines it drives (`fleet_weights`); a node that joins later loads the current weights first.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from polar_cli.cluster.fleet import Fleet
from polar_cli.cluster.fleet_weights import FleetGate, FleetWeights
from polar_cli.cluster.remote import RemoteStages, driver_limits, driver_timeout
from polar_cli.cluster.worker import NodeSpec
from polar_cli.node.pools import Job, PoolLimits, RunEnd, StagePools, Timings
from polar_cli.serve.config import ServeConfig
from polar_cli.serve.node import Cancelled
from polar_cli.serve.results import SessionOutput
from polar_cli.serve.stages import SessionJob

log = logging.getLogger("polar.cluster")


class ClusterServeStages(RemoteStages):
    def __init__(self, fleet: Fleet, cancelled: Cancelled) -> None:
        super().__init__(fleet, lambda job: float(job.payload.plan.timeout))
        self.cancelled = cancelled

    async def postrun(self, job: Job[Any], session: None, end: RunEnd, timings: Timings) -> Any:
        sj: SessionJob = job.payload
        if end.reason == "ok" and isinstance(end.value, SessionOutput):
            return end.value
        if (why := self.cancelled(sj)) is not None:
            return SessionOutput("", "cancelled", reason=f"cancelled: {why}", timings=timings.to_dict())
        return SessionOutput("", "error", reason=f"run_error: {end.error}", timings=timings.to_dict())


class ClusterNode:
    """`serve.node.Node` over the fleet of gateway nodes."""

    def __init__(self, config: ServeConfig, state_dir: Path) -> None:
        c = config.concurrency
        self.config = config
        self.node_id = "cluster"
        self.node_limits = PoolLimits(init=c.init, run=c.run, postrun=c.postrun, ready=c.ready)
        base = config.cluster.nodes.node_dir or str(state_dir.resolve() / "nodes")
        self.fleet = Fleet(config.cluster, lambda name: NodeSpec("serve", config, f"{base}/{name}", self.node_limits))
        self._gate = FleetGate(self.fleet)
        self.weights = FleetWeights(self.fleet, self._gate)
        self.sync_lock = self.weights.lock  # `serve.weights.sync`: no node joins mid-sync
        self.load_weights = self.weights.load
        self.engines = self.weights.engines
        self.limits = driver_limits(1)
        self._pools: StagePools[Any, Any, Any] | None = None

    async def start(self) -> None:
        await self.fleet.start()
        self.limits = driver_limits(self.fleet.capacity())
        self.fleet.on_capacity = self._resize
        self.fleet.on_join = self.weights.joined

    def attach(self, pools: StagePools[Any, Any, Any]) -> None:
        self._pools = pools
        self._resize(self.fleet.capacity())

    def _resize(self, capacity: int) -> None:
        self.limits = driver_limits(capacity)
        if self._pools is not None:
            self._pools.limits = self.limits
            self._pools.kick()

    def job_timeout(self, session_timeout: float) -> float:
        return driver_timeout(session_timeout, self.config.timeouts.eval)

    def stages(self, cancelled: Cancelled) -> ClusterServeStages:
        return ClusterServeStages(self.fleet, cancelled)

    @property
    def gate(self) -> FleetGate:
        return self._gate

    def info(self) -> dict[str, Any]:
        stats = self.fleet.stats() | {"retired_nodes": dict(self.weights.retired_nodes)}
        return {"node_id": self.node_id, "engine": self.config.engine.kind, **stats}

    async def stop(self) -> None:
        await self.fleet.stop()
