"""Benchmark: container INIT time and sessions per minute for each harness, against a zero-latency upstream.

    .venv/bin/python -m tests.integration.harness.bench_sessions [--sessions 5] [--concurrency 1] [--harness pi ...]

Each session is the integration tier's one: a shell-tool call, then a final answer (two model calls), through the
real gateway, in a fresh container from the base image with the harness bundle mounted. INIT is container create to
ready (git base prepared, config written); sessions/minute is completed sessions over wall time.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionOutcome, SessionSpec, run_session
from polar_cli.runtime.bootstrap import BaseRecipe
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.runtime.images import image_names
from tests.integration.harness.shell_policy import ShellToolDouble
from tests.support.gateway import RunningGateway, running_gateway


def one(
    runtime: DockerRuntime, gateway: RunningGateway, harness: str, bundle: str, image: str, n: int
) -> SessionOutcome:
    session_id = f"bench-{harness}-{n}"
    key = gateway.open_session(session_id)
    spec = SessionSpec(session_id, ADAPTERS[harness], image, "Create the probe file.", bundle, timeout=300.0)
    return run_session(runtime, spec, Wiring(gateway.url, key))


def bench(harness: str, sessions: int, concurrency: int, runtime: DockerRuntime, image: str) -> dict[str, float]:
    bundle = runtime.bundle(harness, build=False)
    with (
        tempfile.TemporaryDirectory() as tmp,
        ShellToolDouble("printf ok > /testbed/probe.txt") as upstream,
        running_gateway(upstream.url, Path(tmp)) as gateway,
    ):
        one(runtime, gateway, harness, bundle, image, -1)  # warm-up: page cache, first bundle mount
        start = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            outcomes = list(pool.map(lambda n: one(runtime, gateway, harness, bundle, image, n), range(sessions)))
        wall = time.monotonic() - start
    failed = [o for o in outcomes if o.status != "ok"]
    if failed:
        raise SystemExit(f"{harness}: {len(failed)} session(s) failed: {failed[0].status} {failed[0].output[-500:]}")
    return {
        "init_median": statistics.median(o.timings["init"] for o in outcomes),
        "init_max": max(o.timings["init"] for o in outcomes),
        "run_median": statistics.median(o.timings["run"] for o in outcomes),
        "postrun_median": statistics.median(o.timings["postrun"] for o in outcomes),
        "total_median": statistics.median(o.timings["total"] for o in outcomes),
        "sessions_per_minute": sessions * 60.0 / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--harness", action="append", choices=list(ADAPTERS))
    args = parser.parse_args()
    image = image_names().base(BaseRecipe())
    print(f"{args.sessions} sessions per harness, concurrency {args.concurrency}, image {image}")
    print(f"{'harness':12} {'INIT med':>9} {'INIT max':>9} {'RUN med':>8} {'POST med':>9} {'total':>7} {'sess/min':>9}")
    with DockerRuntime() as runtime:
        for harness in args.harness or list(ADAPTERS):
            r = bench(harness, args.sessions, args.concurrency, runtime, image)
            print(
                f"{harness:12} {r['init_median']:8.2f}s {r['init_max']:8.2f}s {r['run_median']:7.2f}s "
                f"{r['postrun_median']:8.2f}s {r['total_median']:6.2f}s {r['sessions_per_minute']:9.1f}"
            )


if __name__ == "__main__":
    main()
