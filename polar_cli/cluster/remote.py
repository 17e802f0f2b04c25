"""The driver's stage functions on a cluster: each session runs whole on a fleet node, so the driver's own pools only
decide the order (the run's plan order, or the service's priorities) and hold as many sessions as the fleet has
slots (`Fleet.on_capacity` resizes them as nodes join and die).

    INIT     nothing (the node does its own INIT)
    RUN      take a slot on the node with the most free ones, run the session there (INIT..POSTRUN), give it back
    POSTRUN  hand the node's result on; a node lost under the session is a `RunEnd` run_error "node_lost: ..."

The driver's deadline for a session is the node's own (session timeout) plus its grading time and a margin
(`driver_timeout`): the node enforces the real one, the driver only stops waiting for a node that hangs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from polar_cli.cluster.fleet import Fleet
from polar_cli.node.pools import Job, PoolLimits, RunEnd, Timings

# seconds past the session and grading timeouts the driver waits for a node's answer
DRIVER_MARGIN = 600.0


def driver_timeout(session: float, grading: float) -> float:
    return session + grading + DRIVER_MARGIN


def driver_limits(capacity: int) -> PoolLimits:
    """The driver's pools: as many sessions in flight as the fleet has slots (at least one)."""
    n = max(capacity, 1)
    return PoolLimits(init=n, run=n, postrun=n, ready=0)


class RemoteStages:
    def __init__(self, fleet: Fleet, node_timeout: Callable[[Job[Any]], float]) -> None:
        self.fleet = fleet
        self.node_timeout = node_timeout

    async def init(self, job: Job[Any], deadline: float) -> None:
        return None

    async def run(self, job: Job[Any], session: None, deadline: float) -> Any:
        member = await self.fleet.acquire()
        try:
            return await self.fleet.call(member, job.key, job.payload, self.node_timeout(job))
        finally:
            self.fleet.release(member)

    async def postrun(self, job: Job[Any], session: None, end: RunEnd, timings: Timings) -> RunEnd:
        return end

    async def discard(self, job: Job[Any], session: None) -> None:
        return None
