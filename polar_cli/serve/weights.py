"""A weight sync: ``POST /v1/admin/weights {"weight_version", "weights_path", "lora", "mode", "verify"}``.

    pause (drain or abort, the trainer's choice) -> for each engine server the node drives: probe, load the
    checkpoint, read the version it says it serves, probe again -> the servers that failed leave the rotation
    -> stamp the version -> resume

- Rule 1: the gate stays closed from before the first load until the version is stamped, so no call goes to a
  server mid-load and every later call carries the new version.
- Rule 2: a server that refuses the load, reports another version, whose probe does not move (``verify``), or
  whose probe differs from the trainer's own (``expect_probe``: the load ran but the server does not serve the
  checkpoint, as vLLM CPU 0.32's in-place reload can) is taken out of rotation and named; the others serve the new
  weights. If none is left, the service stays paused and the call fails (502): never a mixed fleet, never a silent
  one.
- Rule 3: without ``weights_path`` only the version is stamped (the trainer loaded the weights itself).
- Rule 4: on a fleet (`cluster.fleet_weights`) the pause, the stamp and the resume span every node, each node loads
  what it drives (`load_targets`), and a node left with no engine in rotation leaves the fleet.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from polar_cli.inference.control import moved
from polar_cli.inference.servers import PROBE_IDS, Checkpoint, ReloadError, ServerControl
from polar_cli.serve.models import WeightsRequest
from polar_cli.serve.tasks import TaskError

log = logging.getLogger("polar.serve")
# a probe log-probability that changes by less than this has not moved (fp32 noise is ~1e-6)
MOVED = 1e-4


class SyncFailed(Exception):
    """No engine serves the new weights (502); the service stays paused."""

    def __init__(self, message: str, report: dict[str, Any]) -> None:
        super().__init__(message)
        self.report = report


class Pausable(Protocol):
    """What a sync needs of the service (`serve.service.RolloutService`): its node, and its gate on model calls."""

    node: Any
    paused: str | None

    async def pause(self, mode: str) -> dict[str, Any]: ...

    async def resume(self) -> dict[str, Any]: ...

    async def set_weights(self, version: str) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class WeightTargets:
    """What a node lets a sync reach: its engine servers in rotation, their kind's control, the served model."""

    control: ServerControl
    model: str
    urls: list[str]
    retire: Callable[[str, str], None]


async def sync(
    service: Pausable, request: WeightsRequest, *, transport: httpx.AsyncBaseTransport | None = None
) -> dict[str, Any]:
    """Load, check, stamp (Rules 1-3); ``transport``: how the engines are reached (tests).

    A node that drives its engines through others (a fleet, `cluster.serve.ClusterNode`) offers ``load_weights(request)
    -> (engine reports, extra report fields)`` and ``sync_lock`` (no node joins mid-sync); this one's engines are
    reached directly (``weight_targets``)."""
    version = request.weight_version
    if request.weights_path is None:
        return await service.set_weights(version)
    node = service.node
    loader = getattr(node, "load_weights", None)
    if loader is None:
        targets_of = getattr(node, "weight_targets", None)
        targets: WeightTargets | None = targets_of() if targets_of is not None else None
        if targets is None or not targets.urls:
            raise TaskError("weights_path", "this node drives no engine server to load weights into")

        async def loader(req: WeightsRequest) -> tuple[list[dict[str, Any]], dict[str, Any]]:
            assert targets is not None
            return await load_targets(targets, req, transport), {}

    elif not any(e.get("in_rotation") for e in getattr(node, "engines", list)()):
        raise TaskError("weights_path", "no node of the fleet drives an engine server in rotation to load weights into")
    async with getattr(node, "sync_lock", None) or contextlib.nullcontext():
        started = time.monotonic()
        we_paused = service.paused is None
        if we_paused:
            await service.pause(request.mode)
        paused = time.monotonic()
        engines, extra = await loader(request)
        loaded = time.monotonic()
        report: dict[str, Any] = {
            "weight_version": version,
            "engines": engines,
            "retired": [e["url"] for e in engines if e["error"] is not None],
            **extra,
            "probe_ids": list(PROBE_IDS),
            "seconds": {"pause": round(paused - started, 3), "load": round(loaded - paused, 3)},
        }
        if all(e["error"] is not None for e in engines):
            raise SyncFailed(f"no engine serves {version}; the service stays paused", report)
        await service.set_weights(version)
        if we_paused:
            await service.resume()
    report["seconds"]["total"] = round(time.monotonic() - started, 3)
    return report


async def load_targets(
    targets: WeightTargets, request: WeightsRequest, transport: httpx.AsyncBaseTransport | None = None
) -> list[dict[str, Any]]:
    """Load and check the checkpoint on each server of ``targets`` in turn; a server that fails leaves the rotation
    (``targets.retire``). What a node runs inside the pause (one box, or a fleet node for the driver)."""
    assert request.weights_path is not None
    checkpoint = Checkpoint(request.weights_path, request.weight_version, request.lora)
    async with httpx.AsyncClient(transport=transport) as client:
        engines = [await _one(client, targets, url, checkpoint, request) for url in targets.urls]
    for engine in engines:
        if engine["error"] is not None:
            log.error("engine %s: %s; it leaves the rotation", engine["url"], engine["error"])
            targets.retire(engine["url"], engine["error"])
    return engines


async def _one(
    client: httpx.AsyncClient, targets: WeightTargets, url: str, checkpoint: Checkpoint, request: WeightsRequest
) -> dict[str, Any]:
    out: dict[str, Any] = {"url": url, "error": None, "served_version": None, "probe_before": None}
    out |= {"probe_after": None, "moved": None}
    started = time.monotonic()
    model = checkpoint.lora or targets.model
    try:
        if request.verify:
            out["probe_before"] = await targets.control.probe(client, url, model)
        await targets.control.load(client, url, checkpoint)
        out["served_version"] = await targets.control.served_version(client, url)
        if out["served_version"] is not None and out["served_version"] != checkpoint.version:
            raise ReloadError(f"it says it serves {out['served_version']}, not {checkpoint.version}")
        if request.verify or request.expect_probe is not None:
            out["probe_after"] = await targets.control.probe(client, url, model)
        if request.verify:
            out["moved"] = moved(out["probe_before"], out["probe_after"])
            if out["moved"] < MOVED:
                raise ReloadError(f"its probe did not move ({out['moved']:.2g}): the new weights are not served")
        if request.expect_probe is not None:
            out["off_trainer"] = off = moved(out["probe_after"], request.expect_probe)
            if off > request.probe_tolerance:
                raise ReloadError(
                    f"its probe differs from the trainer's by up to {off:.3g} (> {request.probe_tolerance:g}): "
                    "the load ran, but the server does not serve the checkpoint"
                )
    except (ReloadError, KeyError, IndexError, TypeError, ValueError) as exc:
        out["error"] = str(exc) or type(exc).__name__
    out["seconds"] = round(time.monotonic() - started, 3)
    return out
