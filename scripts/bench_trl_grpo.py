"""Benchmark (issue 24): TRL's GRPOTrainer on `polar serve`'s groups for a few optimizer steps on CPU, SmolLM2-135M by
default, as examples/trl_grpo/run runs it (vLLM CPU in dev mode, Pi in Docker, a weight sync before every rollout
after a step), and the reward curve and the sync time of each step.

    .venv/bin/python scripts/bench_trl_grpo.py [--model smollm2|tiny] [--steps 5] [--out DIR]

Prints one line per step (reward_mean, reward_std, loss, the versions its rows were sampled under, the sync before its
rollout: save + pause + reload + verify + resume, in s) and a JSON summary. The reward is the session's
(``session_completed``) plus the example's toy shaping (examples/trl_grpo/README.md): a curve of the loop, not of a
task learned. Needs what the example needs (.venv-vllm, the models, Docker, the Pi bundle). Not CI.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=("smollm2", "tiny"), default="smollm2")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None, help="the run directory (default: a temporary one)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="polar-bench-trl-"))
    argv = ["bash", "examples/trl_grpo/run", "--model", args.model, "--steps", str(args.steps), "--out", str(out)]
    print(f"{' '.join(argv)}", flush=True)
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, check=False)
    wall = time.monotonic() - started
    path = out / "steps.jsonl"
    steps = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    summary_path = out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    print(f"\n{'step':>4} {'reward_mean':>11} {'reward_std':>10} {'loss':>9} {'sync_s':>7}  versions_seen")
    for s in steps:
        sync = s.get("sync_seconds")
        print(
            f"{s['step']:>4} {_num(s.get('reward_mean'))} {_num(s.get('reward_std'), 10)} {_num(s.get('loss'), 9)} "
            f"{'-' if sync is None else f'{sync:.2f}':>7}  {','.join(s.get('versions_seen', []))}"
        )
    syncs = [s["sync_seconds"] for s in steps if s.get("sync_seconds") is not None]
    final = (summary.get("final_sync") or {}).get("sync_seconds")
    syncs += [final] if final is not None else []
    report = {
        "model": args.model,
        "steps": len(steps),
        "exit": done.returncode,
        "wall_s": round(wall, 1),
        "reward_curve": [s.get("reward_mean") for s in steps],
        "sync_seconds": syncs,
        "parameters_changed": summary.get("parameters_changed"),
        "out": str(out),
    }
    print(json.dumps(report))
    sys.exit(done.returncode)


def _num(value: float | None, width: int = 11) -> str:
    return f"{'-' if value is None else f'{value:.4f}':>{width}}"


if __name__ == "__main__":
    main()
