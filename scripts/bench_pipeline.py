"""Benchmark: RUN-slot occupancy of the node's stage pools with and without the READY buffer; demo wall time.

    .venv/bin/python scripts/bench_pipeline.py                      # INIT 2 s, RUN 5 s, POSTRUN 1 s, 8 RUN slots
    .venv/bin/python scripts/bench_pipeline.py --scale 0.2          # the same, five times faster
    .venv/bin/python scripts/bench_pipeline.py --demo               # also: polar generate recipes/demo.yaml

Simulated sessions are sleeps in the real `node.pools.StagePools`. Occupancy is the time-average of busy RUN slots
over the steady state: from the first moment every slot is busy to the last moment a session starts RUN (before
that the pipeline fills, after it the last sessions drain; neither says anything about the buffer).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polar_cli.node.pools import Job, PoolLimits, RunEnd, Snapshot, StagePools, Timings


@dataclass(frozen=True)
class Durations:
    init: float
    run: float
    postrun: float
    jitter: float = 0.0

    def draw(self, rng: random.Random, base: float) -> float:
        return base * (1.0 + rng.uniform(-self.jitter, self.jitter))


class SleepStages:
    """INIT, RUN and POSTRUN as sleeps."""

    def __init__(self, durations: Durations, seed: int = 0) -> None:
        self.d = durations
        self.rng = random.Random(seed)

    async def init(self, job: Job[int], deadline: float) -> int:
        await asyncio.sleep(self.d.draw(self.rng, self.d.init))
        return job.payload

    async def run(self, job: Job[int], session: int, deadline: float) -> str:
        await asyncio.sleep(self.d.draw(self.rng, self.d.run))
        return "ok"

    async def postrun(self, job: Job[int], session: int | None, end: RunEnd, timings: Timings) -> str:
        await asyncio.sleep(self.d.draw(self.rng, self.d.postrun))
        return end.reason

    async def discard(self, job: Job[int], session: int) -> None:
        return None


def steady_occupancy(samples: list[tuple[float, Snapshot]], slots: int) -> tuple[float, float]:
    """(occupancy, window seconds) over the steady state (see the module docstring)."""
    start = next((t for t, s in samples if s.running == slots), None)
    if start is None:
        return 0.0, 0.0
    starts = [t for (_t0, prev), (t, s) in itertools.pairwise(samples) if s.run_started > prev.run_started]
    end = max(starts, default=start)
    busy = 0.0
    for (t0, s0), (t1, _s1) in itertools.pairwise(samples):
        lo, hi = max(t0, start), min(t1, end)
        if hi > lo:
            busy += s0.running * (hi - lo)
    window = end - start
    return (busy / (slots * window) if window > 0 else 0.0), window


async def simulate(limits: PoolLimits, sessions: int, durations: Durations) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    samples: list[tuple[float, Snapshot]] = []
    results: list[str] = []
    pools: StagePools[int, int, str] = StagePools(
        SleepStages(durations),
        limits,
        lambda job, result, timings: results.append(result),
        on_change=lambda snap: samples.append((loop.time(), snap)),
    )
    started = loop.time()
    await pools.run(Job(f"s{i}", i, timeout=3600.0) for i in range(sessions))
    wall = loop.time() - started
    occupancy, window = steady_occupancy(samples, limits.run)
    return {
        "ready": limits.ready,
        "init_workers": limits.init,
        "sessions": len(results),
        "wall_s": round(wall, 2),
        "steady_occupancy": round(occupancy, 4),
        "steady_window_s": round(window, 2),
        "overall_occupancy": round(pools.occupancy(wall), 4),
        "max_ready": max(s.ready for _t, s in samples),
        "sessions_per_min": round(len(results) * 60 / wall, 1),
    }


def demo(overrides: list[str]) -> dict[str, Any]:
    """`polar generate recipes/demo.yaml` in a fresh run directory; wall time per accepted trajectory."""
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="polar-bench-demo-") as tmp:
        argv = [sys.executable, "-m", "polar_cli", "generate", str(root / "recipes" / "demo.yaml"), *overrides]
        start = time.monotonic()
        done = subprocess.run([*argv, "--out", tmp, "--json"], cwd=root, capture_output=True, text=True)
        wall = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"polar generate failed ({done.returncode}):\n{done.stderr[-3000:]}")
    summary = json.loads(done.stdout)
    accepted = summary["accepted"]
    return {
        "attempts": summary["attempts"],
        "accepted": accepted,
        "command_wall_s": round(wall, 1),
        "run_wall_s": summary["wall_seconds"],
        "wall_s_per_accepted": round(summary["wall_seconds"] / accepted, 2) if accepted else None,
        "mean_stage_s": summary["mean_stage_seconds"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-slots", type=int, default=8)
    parser.add_argument("--init-workers", type=int, default=4)
    parser.add_argument("--ready", type=int, default=8, help="READY buffer of the buffered configuration")
    parser.add_argument("--postrun-workers", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=80)
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every duration (0.2: five times faster)")
    parser.add_argument("--jitter", type=float, default=0.0, help="+- fraction of random variation per stage")
    parser.add_argument("--demo", action="store_true", help="also time polar generate recipes/demo.yaml")
    parser.add_argument("--demo-override", action="append", default=[], help="KEY=VALUE for the demo run")
    args = parser.parse_args()
    durations = Durations(2.0 * args.scale, 5.0 * args.scale, 1.0 * args.scale, args.jitter)
    print(
        f"simulated INIT {durations.init:g} s, RUN {durations.run:g} s, POSTRUN {durations.postrun:g} s"
        f" (jitter {args.jitter:g}), {args.run_slots} RUN slots, {args.sessions} sessions"
    )
    rows = []
    for ready, init_workers in ((0, args.run_slots), (args.ready, args.init_workers)):
        limits = PoolLimits(init=init_workers, run=args.run_slots, postrun=args.postrun_workers, ready=ready)
        rows.append(asyncio.run(simulate(limits, args.sessions, durations)))
    header = (
        "ready",
        "init_workers",
        "steady_occupancy",
        "overall_occupancy",
        "max_ready",
        "wall_s",
        "sessions_per_min",
    )
    print(" ".join(f"{h:>18}" for h in header))
    for row in rows:
        print(" ".join(f"{row[h]!s:>18}" for h in header))
    print(json.dumps({"pools": rows}, indent=None))
    if args.demo:
        print("demo:", json.dumps(demo(args.demo_override)))


if __name__ == "__main__":
    main()
