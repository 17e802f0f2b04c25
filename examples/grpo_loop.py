"""An RL trainer's loop against `polar serve`, without a GPU: submit GRPO groups, read rewards and token fields,
compute group-relative advantages, hand a batch to the trainer.

    # a service of its own per engine (gold: every attempt resolves; noop: none does), on the demo instances
    .venv/bin/python examples/grpo_loop.py --launch gold --steps 1 --group 4
    .venv/bin/python examples/grpo_loop.py --launch noop --steps 1 --group 4
    # or against a service that is already running
    .venv/bin/python examples/grpo_loop.py --server http://127.0.0.1:8200

Where a trainer plugs in: `train_step` receives one batch per step, one row per sample, in the fields trainers take
(the table in polar_cli/serve/README.md maps them to slime's `Sample` and verl's batch). Replace its body with
your trainer's call; call `polar.pause()` / `polar.set_weights(...)` / `polar.resume()` around the weight update.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from polar_cli.client import PolarClient, TaskResult  # noqa: E402

MANIFEST = REPO / "recipes" / "demo" / "instances.jsonl"


def grpo_advantages(rewards: list[float | None], eps: float = 1e-6) -> list[float]:
    """(r - mean) / (std + eps) within one group over the scored sessions; all-equal rewards give zeros (no signal,
    as GRPO intends), a masked session (reward None) gets 0 and is left out of the mean and std."""
    scored = [r for r in rewards if r is not None]
    if not scored:
        return [0.0] * len(rewards)
    mean = sum(scored) / len(scored)
    std = math.sqrt(sum((r - mean) ** 2 for r in scored) / len(scored))
    return [0.0 if r is None else (r - mean) / (std + eps) for r in rewards]


def samples_of(result: TaskResult, group_index: int) -> list[dict[str, Any]]:
    """One training row per trace of every usable session (masked sessions keep their place with zero masks)."""
    advantages = grpo_advantages(result.rewards)
    rows = []
    for session, advantage in zip(result.sessions, advantages, strict=True):
        for trace in session["traces"] or [None]:
            prompt = trace["prompt_ids"] if trace else []
            response = trace["response_ids"] if trace else []
            rows.append(
                {
                    "group_index": group_index,  # slime Sample.group_index / verl non_tensor uid
                    "index": session["index"],
                    "tokens": prompt + response,  # slime Sample.tokens
                    "response_length": len(response),
                    "loss_mask": trace["loss_mask"] if trace else [],
                    "rollout_log_probs": trace["response_logprobs"] if trace else [],
                    "reward": session["reward"],
                    "advantage": 0.0 if session["masked"] else advantage,
                    "weight_versions": session["weight_versions"],
                    "remove_sample": session["masked"],  # slime: drop from the loss, keep the group's size
                }
            )
    return rows


def train_step(step: int, batch: list[dict[str, Any]]) -> dict[str, Any]:
    """THE PLUG-IN POINT: give ``batch`` to your trainer (TRL, verl, slime, NeMo-RL). Here: what it would get."""
    trainable = sum(sum(r["loss_mask"]) for r in batch)
    return {"step": step, "rows": len(batch), "trainable_tokens": trainable}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def launch(engine: str, state_dir: Path, harness: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    config = state_dir / "serve.yaml"
    config.write_text(
        json.dumps(
            {
                "harnesses": [harness],
                "engine": {"kind": engine, "tokenizer": "qwen3"},
                "concurrency": {"init": 2, "run": 2, "postrun": 2, "ready": 2},
                "timeouts": {"session": 600, "eval": 600},
                "service": {"port": port, "state_dir": str(state_dir / "state")},
            }
        )
    )
    polar = [sys.executable, "-m", "polar_cli", "serve", "--config", str(config)]
    with (state_dir / "serve.err").open("wb") as err:
        proc = subprocess.Popen(polar, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    with PolarClient(url) as probe:
        for _ in range(600):
            if probe.health():
                return proc, url
            if proc.poll() is not None:
                raise SystemExit(f"polar serve exited: {(state_dir / 'serve.err').read_text()[-2000:]}")
            time.sleep(0.5)
    raise SystemExit("polar serve did not answer")


def loop(url: str, args: argparse.Namespace) -> list[dict[str, Any]]:
    instance_ids = [json.loads(line)["instance_id"] for line in MANIFEST.read_text().splitlines() if line.strip()]
    report = []
    with PolarClient(url, token=os.environ.get("POLAR_SERVE_TOKEN")) as polar:
        for step in range(args.steps):
            prompts = instance_ids[: args.prompts]
            ids = [f"{args.run}-s{step}-{i}" for i in range(len(prompts))]
            for task_id, instance_id in zip(ids, prompts, strict=True):
                polar.submit(
                    {
                        "task_id": task_id,
                        "instance": {"manifest": str(MANIFEST), "instance_id": instance_id},
                        "num_samples": args.group,
                        "harness": args.harness,
                        "sampling": {"seed_base": 1000 * step, "temperature": 1.0},
                        "metadata": {"step": step, "instance_id": instance_id},
                    }
                )
            batch: list[dict[str, Any]] = []
            groups = []
            for group_index, result in enumerate(polar.iter_results(ids, timeout=args.timeout)):
                batch.extend(samples_of(result, group_index))
                groups.append({"task_id": result.task_id, "rewards": result.rewards, "mean": result.mean_reward})
            polar.pause("drain")  # the weight update: no model call runs on stale weights
            stats = train_step(step, batch)
            polar.set_weights(f"{args.run}-step-{step + 1}")
            polar.resume()
            report.append({**stats, "groups": groups})
            print(json.dumps(report[-1]), flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", help="a running polar serve")
    parser.add_argument("--launch", choices=("gold", "noop"), help="start a polar serve with this engine")
    parser.add_argument("--harness", default="pi")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--prompts", type=int, default=3, help="tasks (GRPO groups) per step")
    parser.add_argument("--group", type=int, default=4, help="samples per group")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--run", default=f"example-{os.getpid()}")
    args = parser.parse_args()
    if bool(args.server) == bool(args.launch):
        parser.error("give --server URL or --launch gold|noop")
    if args.server:
        loop(args.server, args)
        return
    with tempfile.TemporaryDirectory(prefix="polar-example-") as tmp:
        proc, url = launch(args.launch, Path(tmp), args.harness)
        try:
            loop(url, args)
        finally:
            proc.terminate()
            proc.wait(60)


if __name__ == "__main__":
    main()
