"""Benchmark `polar generate`'s own time per session (INIT + POSTRUN, the harness's RUN excluded) against a baseline
revision, in real Docker with the gold engine on the demo recipe (issue 27.4).

Each round runs the demo once with this working tree and once with ``--base`` (a `git archive` of that revision,
imported through PYTHONPATH), alternated so that a machine that drifts drifts for both. Two modes:

- ``isolated``: one session a run (``manifest.limit=1``), nothing else running: the latency a session's own steps add.
- ``pipelined``: all nine sessions, one per stage at a time (``concurrency.init/run/postrun=1``): the sessions'
  stages overlap, as in a run, and compete for the machine's cores.

Prints each run's median INIT, POSTRUN and INIT+POSTRUN per session (from the run's state.jsonl), then the medians
over all rounds and the ratio new/base. Needs what `bash scripts/setup` makes (Docker, the demo images).

    python scripts/bench_overhead.py [--base REV] [--rounds 5] [--mode isolated|pipelined]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = {
    "isolated": ["manifest.limit=1"],
    "pipelined": ["concurrency.init=1", "concurrency.run=1", "concurrency.postrun=1"],
}


def archive(rev: str, into: Path) -> Path:
    """The tree of ``rev``, unpacked into ``into``."""
    data = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def sessions(tree: Path, out: Path, overrides: list[str]) -> list[dict[str, float]]:
    """Run the demo from ``tree`` into ``out``; each session's timing."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    argv = [sys.executable, "-m", "polar_cli", "generate", str(ROOT / "recipes/demo.yaml"), "--no-progress"]
    argv += ["--out", str(out), *overrides]
    done = subprocess.run(argv, cwd=out.parent, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: polar generate failed ({done.returncode}):\n{done.stderr[-2000:]}")
    rows = [json.loads(line) for line in (out / "state.jsonl").read_text().splitlines()]
    return [r["timing"] for r in rows if r.get("type") == "session"]


def medians(timings: list[dict[str, float]]) -> dict[str, float]:
    return {
        "init": statistics.median(t["init"] for t in timings),
        "postrun": statistics.median(t["postrun"] for t in timings),
        "init+postrun": statistics.median(t["init"] + t["postrun"] for t in timings),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", default="HEAD", help="the baseline revision (default: HEAD, against the tree)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mode", choices=sorted(MODES), default="isolated")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="polar-bench-overhead-") as tmp:
        trees = {"base": archive(args.base, Path(tmp) / "base"), "new": ROOT}
        every: dict[str, list[dict[str, float]]] = {"base": [], "new": []}
        for round_ in range(1, args.rounds + 1):
            for name, tree in trees.items():
                timings = sessions(tree, Path(tmp) / f"{name}-{round_}", MODES[args.mode])
                every[name] += timings
                m = medians(timings)
                print(f"round {round_} {name:4}: " + "  ".join(f"{k} {v:.3f} s" for k, v in m.items()), flush=True)
    base, new = medians(every["base"]), medians(every["new"])
    print(f"\n{args.mode}, {args.rounds} round(s), base {args.base}, medians over every session:")
    for key in base:
        print(f"  {key:13} base {base[key]:.3f} s  new {new[key]:.3f} s  new/base {new[key] / base[key]:.2f}")


if __name__ == "__main__":
    main()
