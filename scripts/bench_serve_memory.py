"""Benchmark: peak RSS of `polar serve`'s service over 1,000 finished 8-sample tasks of realistic traces.

    .venv/bin/python scripts/bench_serve_memory.py                 # 1,000 tasks of 8, 33k-token traces
    .venv/bin/python scripts/bench_serve_memory.py --hold --tasks 100  # results held in memory, as before issue 23

The service runs for real (journal and results files on disk, queue, training-safety rules, events) on a simulated
node whose POSTRUN returns one trace per session of ``--prompt`` prompt ids and ``--response`` sampled ids with
their mask and logprobs, each parsed from JSON as a fresh object (as a real POSTRUN's capture read-back makes it).
Tasks are submitted ``--batch`` at a time; each batch is awaited, and the trainer reads every finished group once
(`RolloutService.result`), as a GRPO loop does. RSS (``/proc/self/status`` VmRSS, and the peak VmHWM) is sampled
after each batch; the figures at 100, 500 and 1,000 tasks are printed as JSON. ``--hold`` keeps every whole result in
memory (the summary is the result itself), for the figure before.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from polar_cli.node.pools import Job, PoolLimits, RunEnd, Timings
from polar_cli.serve import service as service_module
from polar_cli.serve.config import parse_serve_config
from polar_cli.serve.journal import Journal
from polar_cli.serve.models import TaskRequest
from polar_cli.serve.results import SessionOutput
from polar_cli.serve.service import RolloutService
from polar_cli.serve.simulated import SimulatedNode, SimulatedStages, Simulation
from polar_cli.serve.stages import SessionJob


def rss_mib() -> tuple[float, float]:
    """(current, peak) resident set size of this process in MiB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def trace_blob(prompt: int, response: int) -> bytes:
    rng = random.Random(7)
    return orjson.dumps(
        {
            "session_id": "s",
            "seqs": list(range(40)),
            "messages": [{"role": "user", "content": "fix it"}, {"role": "assistant", "content": "done"}],
            "tools": "[]",
            "prompt_ids": [rng.randrange(151_000) for _ in range(prompt)],
            "response_ids": [rng.randrange(151_000) for _ in range(response)],
            "loss_mask": [1] * response,
            "response_logprobs": [-rng.random() for _ in range(response)],
            "finish_reason": "stop",
            "metadata": {},
            "weight_versions": [],
        }
    )


class TraceStages(SimulatedStages):
    blob = b""

    async def postrun(self, job: Job[SessionJob], session: str | None, end: RunEnd, timings: Timings) -> SessionOutput:
        sj = job.payload
        return SessionOutput(
            f"{sj.task_id}.{sj.index}.{sj.attempt}.sim",
            "completed",
            reported_reward=float(sj.index % 2),
            report={"type": "simulated"},
            traces=[orjson.loads(self.blob)],
            timings=timings.to_dict(),
        )


class TraceNode(SimulatedNode):
    def stages(self, cancelled: Any) -> SimulatedStages:
        self.last = TraceStages(self.sim, self.gate, cancelled)
        return self.last


async def bench(args: argparse.Namespace, state: Path) -> dict[str, Any]:
    TraceStages.blob = trace_blob(args.prompt, args.response)
    if args.hold:
        service_module.summary = lambda result: result  # type: ignore[attr-defined]
    config = parse_serve_config(
        {"harnesses": ["pi"], "engine": {"kind": "gold", "tokenizer": "qwen3"}, "service": {"state_dir": str(state)}}
    )
    limits = PoolLimits(init=8, run=8, postrun=8, ready=8)
    node = TraceNode(limits, Simulation(init=0.0, run=0.0, postrun=0.0))
    service = RolloutService(config, Journal(state), node)
    await service.start()
    samples: dict[int, dict[str, float]] = {}
    start = time.monotonic()
    try:
        for first in range(0, args.tasks, args.batch):
            ids = [f"t{i}" for i in range(first, min(first + args.batch, args.tasks))]
            for task_id in ids:
                body = {"task_id": task_id, "instruction": "fix it", "runtime": {"image": "img"}, "harness": "pi"}
                service.submit(TaskRequest.model_validate({**body, "num_samples": args.samples}))
            for task_id in ids:
                result = await service.wait(task_id, 600)
                assert result["done"] and len(result["sessions"]) == args.samples, task_id
                del result
            gc.collect()
            done = first + len(ids)
            now, peak = rss_mib()
            samples[done] = {"rss_mib": round(now, 1), "peak_mib": round(peak, 1)}
            if done % 100 == 0:
                print(f"{done} tasks: rss {now:.0f} MiB, peak {peak:.0f} MiB", file=sys.stderr, flush=True)
    finally:
        await service.stop()
    marks = [m for m in (100, 500, 1000) if m in samples] or [max(samples)]
    return {
        "tasks": args.tasks,
        "samples_per_task": args.samples,
        "trace_tokens": args.prompt + args.response,
        "hold": args.hold,
        "wall_s": round(time.monotonic() - start, 1),
        "results_on_disk_mib": round(sum(p.stat().st_size for p in (state / "results").iterdir()) / 2**20, 1),
        "at": {str(m): samples[m] for m in marks},
        "growth_after_100_mib": round(
            samples[max(samples)]["peak_mib"] - samples[min(samples, key=lambda k: abs(k - 100))]["peak_mib"], 1
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=30_000, help="prompt ids per trace")
    parser.add_argument("--response", type=int, default=3_000, help="sampled ids per trace")
    parser.add_argument("--batch", type=int, default=10, help="tasks submitted (and awaited) together")
    parser.add_argument("--hold", action="store_true", help="keep whole results in memory (the behaviour before)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="polar-bench-serve-memory-") as tmp:
        print(json.dumps(asyncio.run(bench(args, Path(tmp))), indent=2))


if __name__ == "__main__":
    main()
