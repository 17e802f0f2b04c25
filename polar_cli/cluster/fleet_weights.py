"""A weight sync on a fleet (`serve.weights.sync` with a `cluster.serve.ClusterNode`): the driver pauses every node's
gate (`FleetGate`), then each node loads the checkpoint into the engine servers it drives and checks them
(`NodeWorker.load_weights`, the probe of `serve.weights`), and the driver stamps the version and resumes every node.

- Rule 1: an engine server is loaded once: one that several nodes list (``engine.url``/``urls`` shared by the fleet)
  is loaded by the first node that lists it; every node drives what it loaded.
- Rule 2: an engine that failed leaves the rotation of every node that drives it. A node left with no engine in
  rotation (or whose load call failed) leaves the fleet: its actor is killed, so its sessions end ``node_lost`` and
  run again on the others, never on weights the version does not name. When no engine loaded, nothing is killed:
  the service stays paused (`serve.weights` Rule 2), as on one box.
- Rule 3: a node that joins later loads the last checkpoint (checked against the trainer's probe when the sync had
  one), learns the version and the pause before it gets work; one whose load fails is left out. Joins and syncs take
  turns (``lock``), so a node never joins between a sync's load and its stamp.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from polar_cli.cluster.fleet import Fleet, Member, _await, actor_errors

if TYPE_CHECKING:
    from polar_cli.serve.models import WeightsRequest

log = logging.getLogger("polar.cluster")


class FleetGate:
    """The model-call gate of every node at once."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.paused: str | None = None
        self.weight_version: str | None = None

    async def pause(self, mode: Any, timeout: float | None = None) -> int:
        self.paused = str(mode)
        return sum(int(n) for n in await self.fleet.broadcast("pause", mode))

    async def resume(self) -> None:
        self.paused = None
        await self.fleet.broadcast("resume")

    async def set_weight_version(self, version: str | None) -> None:
        self.weight_version = version
        await self.fleet.broadcast("set_weight_version", version)

    def status(self) -> dict[str, Any]:
        return {
            "paused": self.paused is not None,
            "mode": self.paused,
            "weight_version": self.weight_version,
            "nodes": len(self.fleet.live()),
        }


class FleetWeights:
    def __init__(self, fleet: Fleet, gate: FleetGate) -> None:
        self.fleet, self.gate = fleet, gate
        self.lock = asyncio.Lock()
        self.synced: WeightsRequest | None = None  # the last checkpoint the fleet serves (late joiners load it)
        self.retired_nodes: dict[str, str] = {}  # node name -> why it left the fleet over weights

    def engines(self) -> list[dict[str, Any]]:
        """Every node's engine servers (as they reported them last), the version each node stamps, in rotation."""
        rows = []
        for m in self.fleet.members:
            for row in m.info.get("engines", []):
                if m.alive:
                    rows.append(row | {"node": m.name, "weight_version": self.gate.weight_version})
                else:
                    why = row.get("retired") or self.retired_nodes.get(m.name) or "its node is lost"
                    rows.append(row | {"node": m.name, "in_rotation": False, "retired": why})
        return rows

    async def load(self, request: WeightsRequest) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Inside the fleet's pause: load and check on every node (Rules 1, 2); the engine reports and the nodes
        that left."""
        live = self.fleet.live()
        listed = await asyncio.gather(*(_await(m.actor.engines.remote()) for m in live), return_exceptions=True)
        broken: dict[Member, str] = {}
        assigned: dict[Member, list[str]] = {}
        owners: set[str] = set()
        for m, rows in zip(live, listed, strict=True):
            if isinstance(rows, BaseException):
                broken[m] = _why(rows)
                continue
            m.info["engines"] = rows
            for row in rows:
                if row["in_rotation"] and row["url"] not in owners:
                    owners.add(row["url"])
                    assigned.setdefault(m, []).append(row["url"])
        loaders = list(assigned)
        results = await asyncio.gather(
            *(_await(m.actor.load_weights.remote(request, assigned[m])) for m in loaders), return_exceptions=True
        )
        engines: list[dict[str, Any]] = []
        for m, result in zip(loaders, results, strict=True):
            if isinstance(result, BaseException):
                broken[m] = _why(result)
                engines += [_failed(m, url, f"node {m.name}: {broken[m]}") for url in assigned[m]]
            else:
                engines += [row | {"node": m.name} for row in result]
        reasons = {e["url"]: e["error"] for e in engines if e["error"] is not None}
        loaded = any(e["error"] is None for e in engines)
        rest = [m for m in live if m not in broken]
        after = await asyncio.gather(
            *(_await(m.actor.retire_engines.remote(reasons)) for m in rest), return_exceptions=True
        )
        for m, rows in zip(rest, after, strict=True):
            if isinstance(rows, BaseException):
                broken[m] = _why(rows)
                continue
            m.info["engines"] = rows
            if rows and not any(r["in_rotation"] for r in rows):
                errors = "; ".join(f"{r['url']}: {r['retired']}" for r in rows)
                broken[m] = f"every engine server it drives failed the load ({errors})"
        left: dict[str, str] = {}
        if loaded:
            for m, why in broken.items():
                self.retire(m, why)
                left[m.name] = why
            self.synced = request
        return engines, {"nodes_retired": left}

    def retire(self, member: Member, why: str) -> None:
        """Out of the fleet for good (Rule 2): lost to the fleet, its actor killed."""
        log.error("gateway node %s leaves the fleet: %s", member.name, why)
        self.retired_nodes[member.name] = why
        self.fleet.lost(member, f"weights not loaded: {why}")
        _kill(member.actor)

    async def joined(self, member: Member) -> None:
        """Rule 3: called by the fleet before ``member`` gets work."""
        async with self.lock:
            try:
                if self.gate.paused is not None:
                    await _await(member.actor.pause.remote(self.gate.paused))
                if self.synced is not None:
                    request = self.synced.model_copy(update={"verify": False})  # its engine may already serve it
                    rows = await _await(member.actor.load_weights.remote(request, None))
                    member.info["engines"] = await _await(member.actor.engines.remote())
                    if not any(r["in_rotation"] for r in member.info["engines"]):
                        errors = "; ".join(f"{r['url']}: {r['error']}" for r in rows if r["error"]) or "no engine"
                        raise RuntimeError(f"it does not serve {self.synced.weight_version}: {errors}")
                if self.gate.weight_version is not None:
                    await _await(member.actor.set_weight_version.remote(self.gate.weight_version))
            except Exception as exc:
                why = _why(exc)
                log.error("gateway node %s is left out: %s", member.name, why)
                self.retired_nodes[member.name] = why
                member.alive = False
                _kill(member.actor)


def _failed(member: Member, url: str, error: str) -> dict[str, Any]:
    return {"node": member.name, "url": url, "error": error, "served_version": None, "probe_before": None}


def _why(exc: BaseException) -> str:
    kind = "its actor is gone" if isinstance(exc, actor_errors()) else type(exc).__name__
    first = str(exc).splitlines()[0][:300] if str(exc) else ""
    return f"{kind}: {first}" if first else kind


def _kill(actor: Any) -> None:
    import ray

    if not ray.is_initialized():  # no cluster in this process (tests): nothing to kill
        return
    with contextlib.suppress(Exception):  # already dead
        ray.kill(actor)
