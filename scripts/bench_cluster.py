"""Benchmark: sessions/min of the driver and its gateway nodes on 1, 2 and 4 local Ray nodes, and the driver's overhead.

    .venv/bin/python scripts/bench_cluster.py                   # INIT 2 s / RUN 5 s / POSTRUN 1 s, 8 RUN slots a node
    .venv/bin/python scripts/bench_cluster.py --scale 0.2       # five times faster

Simulated runtimes: every node actor runs the real node machinery (`cluster.worker.NodeWorker`: its own stage pools,
READY buffer and POSTRUN workers) over sleeps (`serve.simulated`), so no container, harness or model is involved;
what runs for real is Ray (raylets started by `ray.cluster_utils.Cluster` on this machine, the actors, every call
and result crossing process boundaries) and the driver (`cluster.fleet.Fleet`, `cluster.remote.RemoteStages` in the
driver's pools). Each node gets the same slots and the same sessions per node, so linear scaling keeps the wall time
and multiplies sessions/min by the node count. Figures:

- sessions/min per cluster size and the scaling ratio against one node, measured in the same run
  (sessions/min at n nodes / (n x sessions/min at 1 node); the target is >= 0.9);
- the driver's overhead per session: the wall time of the driver's call less the time the node held the session
  (from its call's arrival to its result), in ms: Ray's scheduling, serialisation and the driver's dispatch.

On a machine with fewer cores than nodes the raylets and actors share the cores; sleeping sessions need little CPU,
so the figure is about the control plane, not about harness throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polar_cli.cluster.fleet import Fleet
from polar_cli.cluster.remote import RemoteStages, driver_limits
from polar_cli.cluster.worker import NodeSpec
from polar_cli.config.cluster import ClusterConfig
from polar_cli.node.pools import Job, PoolLimits, RunEnd, StagePools
from polar_cli.serve.config import parse_serve_config
from polar_cli.serve.models import TaskRequest
from polar_cli.serve.simulated import Simulation
from polar_cli.serve.stages import SessionJob
from polar_cli.serve.tasks import Manifests, resolve


def plan() -> Any:
    config = parse_serve_config({"harnesses": ["pi"], "engine": {"kind": "gold", "tokenizer": "qwen3"}})
    request = TaskRequest(task_id="bench", instruction="x", runtime={"image": "img"}, harness="pi")  # type: ignore[arg-type]
    return resolve(request, config, config.adapters(), Manifests())


class Timed(RemoteStages):
    """RemoteStages that note the driver's wall time around each node call."""

    def __init__(self, fleet: Fleet) -> None:
        super().__init__(fleet, lambda job: 3600.0)
        self.walls: dict[str, float] = {}

    async def run(self, job: Job[Any], session: None, deadline: float) -> Any:
        start = time.monotonic()
        try:
            return await super().run(job, session, deadline)
        finally:
            self.walls[job.key] = time.monotonic() - start


async def one_size(
    address: str, nodes: int, sessions: int, sim: Simulation, limits: PoolLimits, tmp: Path
) -> dict[str, Any]:
    cluster = ClusterConfig.model_validate({"ray": {"address": address}, "nodes": {"max_nodes": nodes}})
    fleet = Fleet(cluster, lambda name: NodeSpec("simulated", sim, str(tmp / name), limits))
    await fleet.start()
    try:
        assert len(fleet.live()) == nodes, fleet.stats()
        stages = Timed(fleet)
        outputs: list[tuple[str, RunEnd]] = []
        pools: StagePools[SessionJob, None, RunEnd] = StagePools(
            stages, driver_limits(fleet.capacity()), lambda job, end, t: outputs.append((job.key, end)), run_grace=0
        )
        template = plan()
        jobs = [Job(f"s{i}", SessionJob(template, i), 3600.0) for i in range(sessions)]
        start = time.monotonic()
        await pools.run(jobs)
        wall = time.monotonic() - start
        node_walls: dict[str, float] = {}
        for walls in await fleet.broadcast("walls"):
            node_walls.update(walls)
    finally:
        await fleet.stop()
    ok = [(key, end.value) for key, end in outputs if end.reason == "ok"]
    overhead = [(stages.walls[key] - node_walls[key]) * 1000 for key, _out in ok]
    return {
        "nodes": nodes,
        "sessions": len(ok),
        "wall_s": round(wall, 2),
        "sessions_per_min": round(len(ok) * 60 / wall, 1),
        "driver_overhead_ms": {
            "median": round(statistics.median(overhead), 2),
            "p90": round(sorted(overhead)[int(0.9 * (len(overhead) - 1))], 2),
        },
        "per_node": {n["name"]: n["sessions"] for n in fleet.stats()["nodes"]},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1,2,4")
    parser.add_argument("--run-slots", type=int, default=8)
    parser.add_argument("--per-node", type=int, default=48, help="sessions per node (the same at every size)")
    parser.add_argument("--scale", type=float, default=1.0)
    args = parser.parse_args()
    from ray.cluster_utils import Cluster

    sizes = [int(s) for s in args.sizes.split(",")]
    sim = Simulation(init=2.0 * args.scale, run=5.0 * args.scale, postrun=1.0 * args.scale, success=0.5)
    limits = PoolLimits(init=4, run=args.run_slots, postrun=4, ready=args.run_slots)
    print(
        f"simulated INIT {sim.init:g} s, RUN {sim.run:g} s, POSTRUN {sim.postrun:g} s; per node {args.run_slots} RUN "
        f"slots, READY {limits.ready}, {args.per_node} sessions; sizes {sizes}"
    )
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"polar_node": 1}})
    rows = []
    try:
        for _ in range(max(sizes) - 1):
            cluster.add_node(num_cpus=1, resources={"polar_node": 1})
        cluster.wait_for_nodes()
        with tempfile.TemporaryDirectory(prefix="polar-bench-cluster-") as tmp:
            for n in sizes:
                rows.append(asyncio.run(one_size(cluster.address, n, n * args.per_node, sim, limits, Path(tmp))))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        cluster.shutdown()
    base = next(r for r in rows if r["nodes"] == 1)["sessions_per_min"] if 1 in sizes else None
    if base:
        ratios = {r["nodes"]: round(r["sessions_per_min"] / (r["nodes"] * base), 3) for r in rows}
        print(json.dumps({"scaling_vs_linear": ratios}))


if __name__ == "__main__":
    main()
