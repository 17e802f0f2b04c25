"""TRL's GRPOTrainer trained on `polar serve`'s groups, on CPU (issue 24; ../../../shared/TRAINERS.md has the contract).

    bash examples/trl_grpo/run --steps 3 --out DIR       (sets up, then runs this file)

What runs: vLLM CPU (dev mode, fp32) serves the model; `polar serve` drives it and runs Pi in Docker for every sample;
TRL's `rollout_func` takes each generation batch's groups from Polar (one task per group, ``trainer.rows: main``: one
row per sample, ``env_mask`` as TRL's loss mask, ``null`` rewards for masked samples), and before each rollout after an
optimizer step it saves the weights and has Polar load them into vLLM (``POST /v1/admin/weights`` with the trainer's
own probe logprobs, which the engine's must match). One line per optimizer step goes to DIR/steps.jsonl.

The reward is the session's (``session_completed``: 1.0 when Pi ended normally) plus a toy trainer-side shaping (the
share of sampled ids that are even), so that a group's rewards differ and GRPO has a gradient: the tiny model's
answers all hit the 16-token cap, and Pi ends every session normally. The tied embedding matrix is frozen:
vLLM CPU 0.32's in-place reload does not serve a changed one (docs/design.md "Rollout service").
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from polar_cli.client import PolarClient  # noqa: E402
from polar_cli.inference.servers import PROBE_IDS  # noqa: E402
from tests.support.models import QWEN3_TINY_DIR, SMOLLM2_DIR  # noqa: E402
from tests.support.vllm_server import DEFAULT_ARGS, VLLMServer, free_port  # noqa: E402

MODELS = {"tiny": QWEN3_TINY_DIR, "smollm2": SMOLLM2_DIR}
MANIFEST = ROOT / "recipes" / "demo" / "instances.jsonl"
INSTANCE = json.loads(MANIFEST.read_text().splitlines()[0])["instance_id"]
PROMPTS = ["Print hello.", "List the files.", "Say done.", "Count to three."]
GROUP = 4


def trainer_probe(model: Any) -> list[float]:
    """The trainer's log-probability of each probe id after those before it (what vLLM's prompt_logprobs gives)."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logps = torch.log_softmax(model(torch.tensor([list(PROBE_IDS)])).logits[0].float(), -1)
    model.train(was_training)
    return [logps[i - 1, PROBE_IDS[i]].item() for i in range(1, len(PROBE_IDS))]


class PolarRollouts:
    """The `rollout_func`: groups from Polar, and the weight sync before the first rollout after each step."""

    def __init__(self, polar: PolarClient, out: Path, eos: int) -> None:
        self.polar, self.out, self.eos = polar, out, eos
        self.synced: int | None = None
        self.version = "step-0"
        self.last: dict[str, Any] = {}
        self.syncs: dict[int, dict[str, Any]] = {}

    def sync(self, trainer: GRPOTrainer, step: int) -> None:
        self.version = f"step-{step}"
        if step == 0:
            self.polar.set_weights(self.version)  # the weights vLLM started with
            return
        path = self.out / "checkpoints" / self.version
        started = time.monotonic()
        trainer.model.save_pretrained(path, safe_serialization=True)
        saved = time.monotonic() - started
        report = self.polar.set_weights(self.version, str(path), expect_probe=trainer_probe(trainer.model))
        (engine,) = report["engines"]
        self.syncs[step] = {
            "probe_before": engine["probe_before"],
            "probe_after": engine["probe_after"],
            "probe_trainer_off": engine["off_trainer"],
            "sync_seconds": round(saved + report["seconds"]["total"], 3),
        }

    def __call__(self, prompts: list[str], trainer: GRPOTrainer) -> dict[str, list[Any]]:
        step = trainer.state.global_step
        if self.synced != step:
            self.sync(trainer, step)
            self.synced = step
        ids = []
        for start in range(0, len(prompts), GROUP):
            task_id = f"{self.version}-{uuid.uuid4().hex[:8]}"
            self.polar.submit(
                {
                    "task_id": task_id,
                    "instruction": prompts[start],
                    "instance": {"manifest": str(MANIFEST), "instance_id": INSTANCE},
                    "num_samples": min(GROUP, len(prompts) - start),
                    "harness": "pi",
                    "evaluator": {"type": "session_completed"},
                    "trainer": {"rows": "main"},
                }
            )
            ids.append(task_id)
        rows: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask")}
        rows |= {"polar_reward": [], "weight_versions": []}
        for task_id in ids:
            for session in self.polar.wait(task_id, timeout=1800).sessions:
                trace = session["traces"][0] if session["traces"] else None
                if trace is None or not trace["response_ids"]:  # a masked placeholder keeps the group's size
                    trace = {"prompt_ids": [self.eos], "response_ids": [self.eos], "response_logprobs": [0.0]}
                    trace["env_mask"] = [0]
                rows["prompt_ids"].append(trace["prompt_ids"])
                rows["completion_ids"].append(trace["response_ids"])
                rows["logprobs"].append(trace["response_logprobs"])
                rows["env_mask"].append(trace["env_mask"])
                rows["polar_reward"].append(session["reward"])
                rows["weight_versions"].append(session["weight_versions"])
        self.last = {
            "rows": len(rows["prompt_ids"]),
            "task_ids": ids,
            "versions_seen": sorted({v for vs in rows["weight_versions"] for v in vs}),
            "weight_version": self.version,
            **self.syncs.get(step, {}),
        }
        return rows


def reward(completion_ids: list[list[int]], polar_reward: list[float | None], **_: Any) -> list[float | None]:
    """The session's reward plus a toy shaping (the share of sampled ids that are even) so that a group's rewards
    differ; None (no reward) for a masked session."""
    return [
        None if r is None else r + sum(i % 2 == 0 for i in ids) / max(1, len(ids))
        for r, ids in zip(polar_reward, completion_ids, strict=True)
    ]


class StepLog(TrainerCallback):
    def __init__(self, rollouts: PolarRollouts, path: Path) -> None:
        self.rollouts, self.path = rollouts, path

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
        if not logs or "loss" not in logs:
            return
        line = {
            "step": state.global_step,
            "loss": logs.get("loss"),
            "grad_norm": logs.get("grad_norm"),
            "reward_mean": logs.get("reward"),
            "reward_std": logs.get("reward_std"),
            **self.rollouts.last,
        }
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")


def serve_config(out: Path, engine_url: str, model_dir: Path, port: int) -> Path:
    config = {
        "name": "trl-grpo",
        "harnesses": ["pi"],
        "engine": {"kind": "vllm", "url": engine_url, "tokenizer": str(model_dir), "max_tokens_cap": 16},
        "runtime": {"min_free_gb": 0},
        "concurrency": {"init": 2, "run": 2, "postrun": 2, "ready": 2},
        "timeouts": {"session": 240, "eval": 600},
        "service": {"port": port, "state_dir": str(out / "serve")},
    }
    path = out / "serve.json"
    path.write_text(json.dumps(config))
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny")
    parser.add_argument("--lr", type=float, default=5e-3)
    args = parser.parse_args()
    out: Path = args.out.resolve()
    for stale in ("checkpoints", "serve"):  # a run starts afresh in DIR
        shutil.rmtree(out / stale, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "steps.jsonl").write_text("")
    model_dir = MODELS[args.model]
    vllm_args = (*DEFAULT_ARGS, "--dtype", "float32", "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    vllm = VLLMServer(
        model_dir, model_dir.name, log_path=out / "vllm.log", extra_args=vllm_args, env={"VLLM_SERVER_DEV_MODE": "1"}
    )
    with vllm:
        port = free_port()
        argv = [
            sys.executable,
            "-m",
            "polar_cli",
            "serve",
            "--config",
            str(serve_config(out, vllm.url, model_dir, port)),
        ]
        serve = subprocess.Popen(argv, cwd=ROOT, stdout=(out / "serve.log").open("ab"), stderr=subprocess.STDOUT)
        polar = PolarClient(f"http://127.0.0.1:{port}", timeout=60)
        try:
            while not polar.health():
                if serve.poll() is not None:
                    raise SystemExit(f"polar serve exited; see {out / 'serve.log'}")
                time.sleep(0.5)
            train(args, out, model_dir, polar)
        finally:
            polar.close()
            serve.terminate()
            serve.wait(120)


def train(args: Any, out: Path, model_dir: Path, polar: PolarClient) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    model.get_input_embeddings().weight.requires_grad_(False)  # tied: vLLM CPU's reload would not serve it
    config = GRPOConfig(
        output_dir=str(out / "trl"),
        use_cpu=True,
        bf16=False,
        per_device_train_batch_size=GROUP,
        num_generations=GROUP,
        max_steps=args.steps,
        learning_rate=args.lr,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        gradient_checkpointing=False,  # TRL's default is on: slower, and nothing to save on a tiny model
        beta=0.0,
        seed=0,
    )
    rollouts = PolarRollouts(polar, out, tokenizer.eos_token_id or 0)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=config,
        train_dataset=Dataset.from_dict({"prompt": PROMPTS * 8}),
        processing_class=tokenizer,
        rollout_func=rollouts,
        callbacks=[StepLog(rollouts, out / "steps.jsonl")],
    )
    initial = {k: v.detach().clone() for k, v in model.named_parameters()}
    trainer.train()
    changed = sum(not torch.equal(initial[k], v) for k, v in model.named_parameters())
    # the weights of the last step reach the engine too: a last rollout would sample them
    rollouts.sync(trainer, trainer.state.global_step)
    summary = {"steps": trainer.state.global_step, "parameters_changed": changed, "parameters": len(initial)}
    summary |= {"final_sync": rollouts.syncs.get(trainer.state.global_step)}
    (out / "summary.json").write_text(json.dumps(summary))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
