"""The driver's view of the cluster: one node actor per Ray node that advertises the node resource, placed and
supervised by Ray (no registration or heartbeat of our own), and the free slots of each.

- Placement: an actor is pinned to its Ray node (`NodeAffinitySchedulingStrategy`, not soft) and takes one unit of the
  resource, so a machine runs one gateway node.
- Pressure: a session goes to the live node with the most free slots (its capacity less what it holds), so a fast
  node takes more work and a slow one is not flooded: work stealing by stage pressure, not static shards.
- Joins: Ray tells of new nodes only when asked, so the fleet looks every ``cluster.nodes.poll_interval`` seconds;
  a node that joins mid-run gets work as soon as its actor has started.
- Loss: Ray tells at once: the call of every session on a dead actor raises, the node is marked lost, its sessions
  are the caller's to run again (`NodeLost`), and a surviving node sweeps the containers the dead one left on its
  machine (on one machine they are its neighbours'; a dead machine takes its containers with it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from polar_cli.cluster.worker import NodeSpec
from polar_cli.config.cluster import ClusterConfig
from polar_cli.errors import PolarError
from polar_cli.node.health import DependencyLost

log = logging.getLogger("polar.cluster")


class ClusterError(DependencyLost):
    """The cluster cannot run the work: Ray is not reachable, or no node advertises the resource or starts (a lost
    dependency: the run writes its summary and exits 1)."""


class NodeLost(PolarError):
    """The node a session ran on died (its actor, its raylet or its machine): run the session again elsewhere."""

    kind = "node_lost"


@dataclass(eq=False)
class Member:
    ray_node: str
    actor: Any
    name: str = ""
    capacity: int = 1
    in_flight: int = 0
    alive: bool = True
    sessions: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def free(self) -> int:
        return self.capacity - self.in_flight if self.alive else 0


def actor_errors() -> tuple[type[BaseException], ...]:
    """What Ray raises for a call whose actor is dead or unreachable (not for an exception the method raised)."""
    import ray.exceptions as rex

    found = [rex.RayActorError, getattr(rex, "ActorUnavailableError", None), rex.WorkerCrashedError]
    found += [getattr(rex, "NodeDiedError", None), getattr(rex, "OwnerDiedError", None)]
    return tuple(e for e in found if isinstance(e, type))


class Fleet:
    def __init__(self, cluster: ClusterConfig, spec: Callable[[str], NodeSpec]) -> None:
        self.cluster = cluster
        self.spec = spec
        self.members: list[Member] = []
        self.failed: dict[str, str] = {}  # ray node id -> why its actor did not start
        self.retries: Counter[str] = Counter()
        self.on_capacity: Callable[[int], None] | None = None
        # told of each node that joined, before it gets work (a late node learns the current weight version)
        self.on_join: Callable[[Member], Awaitable[None]] | None = None
        self._changed = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        self._sweeps: set[asyncio.Task[None]] = set()

    # ---- life ------------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        import ray

        address = self.cluster.ray.address
        try:
            ray.init(
                address=address,
                namespace=self.cluster.ray.namespace,
                log_to_driver=False,
                logging_level=logging.WARNING,
                ignore_reinit_error=True,
            )
        except Exception as exc:  # ConnectionError, RuntimeError, ...: Ray's own words say what
            raise ClusterError(f"cluster.ray.address {address}: cannot connect to Ray: {exc}") from exc
        await self._join_new()
        if not self.live():
            why = "; ".join(f"{n[:12]}: {e}" for n, e in self.failed.items()) or "none advertises it"
            raise ClusterError(f"no Ray node runs a gateway node (resource {self.cluster.nodes.resource!r}: {why})")
        self._watcher = asyncio.get_running_loop().create_task(self._watch_joins())

    def _candidates(self) -> list[str]:
        import ray

        resource = self.cluster.nodes.resource
        known = {m.ray_node for m in self.members} | set(self.failed)
        found = [
            n["NodeID"]
            for n in ray.nodes()  # type: ignore[no-untyped-call]
            if n.get("Alive") and n.get("Resources", {}).get(resource, 0) >= 1 and n["NodeID"] not in known
        ]
        room = None if self.cluster.nodes.max_nodes is None else self.cluster.nodes.max_nodes - len(self.live())
        return found if room is None else found[: max(room, 0)]

    async def _join_new(self) -> None:
        from polar_cli.cluster.actor import start_actor

        candidates = self._candidates()
        if not candidates:
            return

        async def one(ray_node: str) -> None:
            name = f"node-{ray_node[:8]}"
            try:
                actor = start_actor(ray_node, self.cluster, self.spec(name), name)
                info = await asyncio.wait_for(_await(actor.start.remote()), self.cluster.nodes.start_timeout)
            except Exception as exc:
                log.error("Ray node %s: its gateway node did not start: %s", ray_node[:12], exc)
                self.failed[ray_node] = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
                return
            member = Member(ray_node, actor, name=name, capacity=int(info["capacity"]), info=info)
            if self.on_join is not None:
                await self.on_join(member)
            self.members.append(member)
            log.info("gateway node %s up on %s (%d slots)", name, info.get("host"), member.capacity)
            self._notify()

        await asyncio.gather(*(one(n) for n in candidates))

    async def _watch_joins(self) -> None:
        while True:
            await asyncio.sleep(self.cluster.nodes.poll_interval)
            try:
                await self._join_new()
            except Exception:
                log.exception("looking for new Ray nodes failed")

    async def stop(self) -> None:
        import ray

        for background in (self._watcher, *self._sweeps):
            if background is not None:
                background.cancel()
        await asyncio.gather(*(t for t in (self._watcher, *self._sweeps) if t is not None), return_exceptions=True)
        live = self.live()
        if live and any(not m.alive for m in self.members):  # what lost nodes left, before the survivors go
            with contextlib.suppress(Exception):
                await asyncio.wait_for(_await(live[0].actor.sweep.remote()), 60)
        if live:
            await asyncio.gather(
                *(asyncio.wait_for(_await(m.actor.stop.remote()), 120) for m in live), return_exceptions=True
            )
        for m in self.members:
            with contextlib.suppress(Exception):  # already dead
                ray.kill(m.actor)
        ray.shutdown()

    # ---- work --------------------------------------------------------------------------------------------------------

    def live(self) -> list[Member]:
        return [m for m in self.members if m.alive]

    def capacity(self) -> int:
        return sum(m.capacity for m in self.live())

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
        if self.on_capacity is not None:
            self.on_capacity(self.capacity())

    async def acquire(self) -> Member:
        """A slot on the live node with the most free ones (waits while every node is full)."""
        loop = asyncio.get_running_loop()
        empty_since: float | None = None
        while True:
            best = max(self.live(), key=lambda m: (m.free, -m.in_flight), default=None)
            if best is not None and best.free > 0:
                best.in_flight += 1
                best.sessions += 1
                return best
            if best is not None:
                await self._changed.wait()
                continue
            # every node is lost: wait for one to join, as long as a node may take to start
            empty_since = loop.time() if empty_since is None else empty_since
            if self._watcher is None or loop.time() - empty_since > self.cluster.nodes.start_timeout:
                raise ClusterError("every gateway node is lost, and none joined")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), self.cluster.nodes.poll_interval)

    def release(self, member: Member) -> None:
        member.in_flight -= 1
        self._notify()

    async def call(self, member: Member, key: str, payload: Any, timeout: float) -> Any:
        """Run one session on ``member``; `NodeLost` when its node died under it."""
        import ray

        ref = member.actor.run.remote(key, payload, timeout)
        try:
            return await _await(ref)
        except actor_errors() as exc:
            self.lost(member, exc)
            self.retries["node_lost"] += 1
            raise NodeLost(
                f"node_lost: gateway node {member.name} died under the session ({type(exc).__name__})"
            ) from exc
        except asyncio.CancelledError:
            ray.cancel(ref)
            raise

    def lost(self, member: Member, why: BaseException | str) -> None:
        if not member.alive:
            return
        member.alive = False
        log.warning("gateway node %s is lost (%s): its sessions run again elsewhere", member.name, why)
        self._notify()
        survivors = self.live()
        if survivors:  # the dead node's containers, where they outlive it (one machine, or a raylet that died alone)
            task = asyncio.get_running_loop().create_task(_swept(survivors[0]))
            self._sweeps.add(task)
            task.add_done_callback(self._sweeps.discard)

    async def broadcast(self, method: str, *args: Any) -> list[Any]:
        """Call ``method`` on every live node (a weight sync); a node that dies meanwhile is marked lost."""
        live = self.live()
        results = await asyncio.gather(
            *(_await(getattr(m.actor, method).remote(*args)) for m in live), return_exceptions=True
        )
        for member, result in zip(live, results, strict=True):
            if isinstance(result, actor_errors()):
                self.lost(member, result)
        return [r for r in results if not isinstance(r, BaseException)]

    def stats(self) -> dict[str, Any]:
        return {
            "nodes": [
                {
                    "name": m.name,
                    "host": m.info.get("host"),
                    "alive": m.alive,
                    "capacity": m.capacity,
                    "in_flight": m.in_flight,
                    "sessions": m.sessions,
                }
                for m in self.members
            ],
            "failed_to_start": dict(self.failed),
            "retries": dict(self.retries),
        }


async def _await(ref: Any) -> Any:
    result: Any = await ref
    return result


# seconds after a node is declared lost at which a survivor sweeps: the dead actor's process may outlive its raylet by
# a moment, and the sweep only removes containers whose owner process is gone
SWEEP_AFTER = (2.0, 10.0, 30.0)


async def _swept(member: Member) -> None:
    waited = 0.0
    for at in SWEEP_AFTER:
        await asyncio.sleep(at - waited)
        waited = at
        try:
            removed = await _await(member.actor.sweep.remote())
        except Exception as exc:
            log.info("sweeping after a lost node failed: %s", exc)
            return
        if removed:
            log.info("gateway node %s removed %d container(s) a lost node left behind", member.name, removed)
