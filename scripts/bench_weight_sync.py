"""The time of one weight sync on this machine (issue 24): a real vLLM CPU server in dev mode on a small model, a
checkpoint moved by noise (the tied embeddings kept, see docs/design.md "Rollout service"), and Polar's engine
control (`inference.control`, what `serve.weights` runs per server): save, probe, load, read the version, probe.

    .venv/bin/python scripts/bench_weight_sync.py [tiny|smollm2] [--repeat N]

Prints one JSON line per sync and the median. Needs .venv-vllm and the models (scripts/setup-tests). Not CI.
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

import httpx
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polar_cli.inference.control import moved
from polar_cli.inference.servers import SERVERS, Checkpoint
from tests.support.models import QWEN3_TINY_DIR, SMOLLM2_DIR
from tests.support.vllm_server import DEFAULT_ARGS, VLLMServer

MODELS = {"tiny": QWEN3_TINY_DIR, "smollm2": SMOLLM2_DIR}


def save(source: Path, dest: Path, seed: int) -> float:
    """Write a checkpoint as a trainer would (safetensors, the model's files beside it); seconds taken."""
    started = time.monotonic()
    dest.mkdir(parents=True)
    for f in source.iterdir():
        if f.is_file() and f.suffix != ".safetensors":
            (dest / f.name).write_bytes(f.read_bytes())
    noise = torch.Generator().manual_seed(seed)
    weights = {
        k: v if "embed" in k else (v.float() + 0.01 * torch.randn(v.shape, generator=noise)).to(v.dtype)
        for k, v in load_file(str(source / "model.safetensors")).items()
    }
    save_file(weights, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return time.monotonic() - started


async def sync(url: str, model: str, path: Path, version: str) -> dict[str, float]:
    vllm = SERVERS["vllm"]
    async with httpx.AsyncClient() as client:
        t0 = time.monotonic()
        before = await vllm.probe(client, url, model)
        t1 = time.monotonic()
        await vllm.load(client, url, Checkpoint(str(path), version))
        t2 = time.monotonic()
        served = await vllm.served_version(client, url)
        after = await vllm.probe(client, url, model)
        t3 = time.monotonic()
    assert served == version, served
    return {
        "probe": round(t1 - t0, 3),
        "load": round(t2 - t1, 3),
        "verify": round(t3 - t2, 3),
        "moved": moved(before, after),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=sorted(MODELS), nargs="?", default="tiny")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    source = MODELS[args.model]
    extra = (*DEFAULT_ARGS, "--dtype", "float32")
    with (
        tempfile.TemporaryDirectory() as tmp,
        VLLMServer(source, "policy", extra_args=extra, env={"VLLM_SERVER_DEV_MODE": "1"}) as server,
    ):
        print(json.dumps({"model": args.model, "vllm_ready_s": round(server.ready_after_s, 1)}), flush=True)
        totals = []
        for step in range(1, args.repeat + 1):
            path = Path(tmp) / f"step-{step}"
            saved = save(source, path, step)
            times = asyncio.run(sync(server.url, "policy", path, f"step-{step}"))
            total = saved + times["probe"] + times["load"] + times["verify"]
            totals.append(total)
            print(json.dumps({"step": step, "save": round(saved, 3), **times, "total": round(total, 3)}), flush=True)
        print(json.dumps({"model": args.model, "median_sync_s": round(statistics.median(totals), 3)}))


if __name__ == "__main__":
    main()
