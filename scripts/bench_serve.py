"""Benchmark: `polar serve` against the same load through the node's pools as `polar generate` drives them, in one run.

    .venv/bin/python scripts/bench_serve.py               # 20 GRPO groups of 8, INIT 2 s / RUN 5 s / POSTRUN 1 s
    .venv/bin/python scripts/bench_serve.py --scale 0.1   # the same, ten times faster
    .venv/bin/python scripts/bench_serve.py --groups 10 --sync-at 13   # and sessions/min across a 20 s weight sync

Simulated runtimes: sessions are sleeps (`serve.simulated`, the same durations as `bench_pipeline.py`); no container,
no harness, no model. What runs for real: the service (journal on disk, queue, results, training-safety rules,
events), its HTTP API on loopback (tasks submitted through it, one group after another at ``--interval``), and
callbacks POSTed to a local receiver. The baseline is the same sessions as one fixed job list through `StagePools`,
which is what a generate run's node does. Figures:

- sessions/min and RUN-slot occupancy of each, and their ratio (service / baseline);
- control-plane overhead per session: submit -> its first INIT (queueing behind busy slots excluded: only sessions that
  found a slot free are counted), and its last POSTRUN -> the task's callback received, in ms.

With ``--sync-at S`` the service is run twice more, once without and once with a weight sync S seconds into the run
(``POST /v1/admin/weights`` with a checkpoint: `serve.weights.sync` pauses the gate in drain mode, the engine load is
a sleep of ``--sync-load`` seconds, the version is stamped, the gate resumes), with a session timeout of
``--session-timeout`` (default: 1.5x a session's INIT + RUN, shorter than the pause): sessions/min of both, sessions
lost (submitted but never returned: must be 0) and timed out (the simulation has none of its own, so every timeout
is the pause's: must be 0, pause time is credited to deadlines), and how many samples straddled the sync.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from polar_cli.gateway.server import GatewayServer
from polar_cli.node.pools import Job, PoolLimits, RunEnd, StagePools, Timings
from polar_cli.serve.api import ServiceApi
from polar_cli.serve.config import parse_serve_config
from polar_cli.serve.journal import Journal
from polar_cli.serve.service import RolloutService
from polar_cli.serve.simulated import SimulatedNode, Simulation


class Sleeps:
    def __init__(self, sim: Simulation) -> None:
        self.sim = sim

    async def init(self, job: Job[int], deadline: float) -> int:
        await asyncio.sleep(self.sim.init)
        return job.payload

    async def run(self, job: Job[int], session: int, deadline: float) -> str:
        await asyncio.sleep(self.sim.run)
        return "ok"

    async def postrun(self, job: Job[int], session: int | None, end: RunEnd, timings: Timings) -> str:
        await asyncio.sleep(self.sim.postrun)
        return end.reason

    async def discard(self, job: Job[int], session: int) -> None:
        return None


async def baseline(limits: PoolLimits, sim: Simulation, sessions: int) -> dict[str, Any]:
    done: list[str] = []
    pools: StagePools[int, int, str] = StagePools(Sleeps(sim), limits, lambda j, r, t: done.append(r))
    start = time.monotonic()
    await pools.run(Job(f"s{i}", i, 3600.0) for i in range(sessions))
    wall = time.monotonic() - start
    return {
        "sessions": len(done),
        "wall_s": round(wall, 2),
        "sessions_per_min": round(len(done) * 60 / wall, 1),
        "occupancy": round(pools.occupancy(wall), 4),
    }


class Receiver:
    def __init__(self) -> None:
        self.received: dict[str, float] = {}

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        headers = dict(
            (k.strip().lower(), v.strip())
            for k, _, v in (x.partition(":") for x in head.decode().split("\r\n")[1:] if x)
        )
        await reader.readexactly(int(headers.get("content-length", "0")))
        self.received.setdefault(headers["idempotency-key"], time.monotonic())
        writer.write(b"HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        await writer.drain()
        writer.close()


class SyncingNode(SimulatedNode):
    """A simulated node whose weight load (`serve.weights.sync`'s ``load_weights``) takes ``load`` seconds."""

    def __init__(self, limits: PoolLimits, sim: Simulation, load: float) -> None:
        super().__init__(limits, sim)
        self.load = load

    async def load_weights(self, request: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        await asyncio.sleep(self.load)
        return [{"url": "sim://engine-0", "error": None, "served_version": request.weight_version}], {}


async def service_run(
    limits: PoolLimits,
    sim: Simulation,
    groups: int,
    size: int,
    interval: float,
    tmp: Path,
    *,
    sync_at: float | None = None,
    sync_load: float = 0.0,
    session_timeout: float | None = None,
) -> dict[str, Any]:
    receiver = Receiver()
    hook = await asyncio.start_server(receiver.handle, "127.0.0.1", 0)
    hook_url = f"http://127.0.0.1:{hook.sockets[0].getsockname()[1]}/"
    config = parse_serve_config(
        {
            "harnesses": ["pi"],
            "engine": {"kind": "gold", "tokenizer": "qwen3"},
            "service": {"state_dir": str(tmp / "state"), "callback": {"backoff": 0.05}},
            **({"timeouts": {"session": session_timeout}} if session_timeout is not None else {}),
        }
    )
    node = SyncingNode(limits, sim, sync_load)
    service = RolloutService(config, Journal(tmp / "state"), node)
    await service.start()
    server = GatewayServer(ServiceApi(service, None))
    host, port = await server.start("127.0.0.1", 0)
    submitted: dict[str, float] = {}
    try:
        start = time.monotonic()
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=600) as client:
            if sync_at is not None:  # the version before the sync, so that a sample that straddles it shows two
                (await client.post("/v1/admin/weights", json={"weight_version": "step-0"})).raise_for_status()
            syncing = asyncio.create_task(_sync(client, sync_at)) if sync_at is not None else None
            for g in range(groups):
                task_id = f"g{g}"
                body = {
                    "task_id": task_id,
                    "instruction": "x",
                    "runtime": {"image": "img"},
                    "harness": "pi",
                    "num_samples": size,
                    "callback_url": hook_url,
                }
                submitted[task_id] = time.monotonic()
                r = await client.post("/v1/tasks", json=body)
                r.raise_for_status()
                await asyncio.sleep(interval)
            while len(receiver.received) < groups:
                await asyncio.sleep(0.01)
            sync = await syncing if syncing is not None else None
        wall = time.monotonic() - start
        assert service.pools is not None
        occupancy = service.pools.busy_seconds / (limits.run * wall)
        to_init, to_callback = [], []
        mono_offset = time.monotonic() - time.time()
        for task_id, task in service.tasks.items():
            firsts: dict[int, float] = {}
            last_post = 0.0
            free = {e["sample"] for e in task.events if e["state"] == "queued"}
            for e in task.events:
                t = e["t"] + mono_offset
                if e["state"] == "init":
                    firsts.setdefault(e["sample"], t)
                if e["state"] in ("completed", "error", "timeout", "cancelled"):
                    last_post = max(last_post, t)
            # only samples that found an INIT slot at once: submit -> INIT is then the control plane alone
            queued_behind = {i for i, t in firsts.items() if t - submitted[task_id] > sim.init / 2}
            to_init.extend((firsts[i] - submitted[task_id]) * 1000 for i in free - queued_behind if i in firsts)
            to_callback.append((receiver.received[task_id] - last_post) * 1000)
        sessions = sum(len(t.results) for t in service.tasks.values())
        ended = [r for t in service.tasks for r in service.result(t)["sessions"]]
        statuses: dict[str, int] = {}
        for r in ended:
            statuses[r["status"]] = statuses.get(r["status"], 0) + 1
        straddled = sum(len(r.get("weight_versions") or []) > 1 for r in ended)
        versions_seen = Counter(tuple(r.get("weight_versions") or ()) for r in ended)
    finally:
        await server.stop()
        await service.stop()
        hook.close()
    return {
        "sessions": sessions,
        "wall_s": round(wall, 2),
        "sessions_per_min": round(sessions * 60 / wall, 1),
        "occupancy": round(occupancy, 4),
        "submit_to_init_ms": _spread(to_init),
        "postrun_to_callback_ms": _spread(to_callback),
        "statuses": statuses,
        "lost": groups * size - sessions,
        "timed_out": statuses.get("timeout", 0),
        "straddled_the_sync": straddled,
        "versions_seen": {"+".join(k) or "none": n for k, n in sorted(versions_seen.items())},
        "sync": sync,
    }


async def _sync(client: httpx.AsyncClient, at: float) -> dict[str, Any]:
    await asyncio.sleep(at)
    reply = await client.post("/v1/admin/weights", json={"weight_version": "step-1", "weights_path": "/sim/step-1"})
    reply.raise_for_status()
    return {"at_s": at, "seconds": reply.json()["seconds"]}


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)
    return {
        "n": len(values),
        "median": round(statistics.median(values), 2),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
        "max": round(ordered[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=20)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--run-slots", type=int, default=8)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every duration")
    parser.add_argument(
        "--interval",
        type=float,
        default=None,
        help="seconds between two submitted groups (default: the rate the RUN slots drain: group size x RUN / slots)",
    )
    parser.add_argument("--sync-at", type=float, default=None, help="also run with a weight sync this many s in")
    parser.add_argument("--sync-load", type=float, default=None, help="seconds the engine load takes (default 4x RUN)")
    parser.add_argument("--session-timeout", type=float, default=None, help="default: 1.5x (INIT + RUN)")
    args = parser.parse_args()
    sim = Simulation(init=2.0 * args.scale, run=5.0 * args.scale, postrun=1.0 * args.scale, success=0.5)
    limits = PoolLimits(init=4, run=args.run_slots, postrun=4, ready=args.run_slots)
    interval = args.interval if args.interval is not None else args.group_size * sim.run / args.run_slots
    sessions = args.groups * args.group_size
    print(
        f"simulated INIT {sim.init:g} s, RUN {sim.run:g} s, POSTRUN {sim.postrun:g} s; {args.run_slots} RUN slots; "
        f"{args.groups} groups of {args.group_size}, one every {interval:g} s"
    )
    base = asyncio.run(baseline(limits, sim, sessions))
    with tempfile.TemporaryDirectory(prefix="polar-bench-serve-") as tmp:
        served = asyncio.run(service_run(limits, sim, args.groups, args.group_size, interval, Path(tmp)))
    ratio = {
        "sessions_per_min": round(served["sessions_per_min"] / base["sessions_per_min"], 3),
        "occupancy": round(served["occupancy"] / base["occupancy"], 3),
    }
    print(json.dumps({"baseline_pools": base, "service": served, "ratio_service_over_baseline": ratio}, indent=2))
    if args.sync_at is None:
        return
    load = args.sync_load if args.sync_load is not None else 4 * sim.run
    timeout = args.session_timeout if args.session_timeout is not None else 1.5 * (sim.init + sim.run)
    runs = {}
    for name, at in (("without_sync", None), ("with_sync", args.sync_at)):
        with tempfile.TemporaryDirectory(prefix="polar-bench-serve-") as tmp:
            runs[name] = asyncio.run(
                service_run(
                    limits,
                    sim,
                    args.groups,
                    args.group_size,
                    interval,
                    Path(tmp),
                    sync_at=at,
                    sync_load=load,
                    session_timeout=timeout,
                )
            )
    keep = ("sessions", "wall_s", "sessions_per_min", "statuses", "lost", "timed_out", "straddled_the_sync")
    keep += ("versions_seen", "sync")
    print(f"weight sync at {args.sync_at:g} s, engine load {load:g} s (simulated), session timeout {timeout:g} s")
    print(json.dumps({name: {k: run[k] for k in keep} for name, run in runs.items()}, indent=2))


if __name__ == "__main__":
    main()
