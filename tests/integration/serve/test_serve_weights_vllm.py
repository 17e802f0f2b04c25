"""Weights for real (issue 24, item 1): `polar serve` loads a new checkpoint into the REAL vLLM CPU server it drives
(``POST /v1/admin/weights`` with ``weights_path``), inside its pause, checks it (vLLM's own ``/weight_info``, a probe
whose logprobs move to what the trainer's copy of the weights gives), stamps the version on the next session's
calls. A checkpoint that also changes the tied embedding matrix is one vLLM CPU 0.32 "reloads" without serving it
(its probe moves, but ~0.5 nats away from the trainer's): Polar catches that with the trainer's probe, takes the
engine out of rotation, and with no engine left stays paused and says so.

The tiny random-weight Qwen3 (tests/support/models.py), vLLM in dev mode (its reload routes), Pi in Docker for the
session after the sync. Needs .venv-vllm, the models (scripts/setup-tests), Docker and the Pi bundle; a missing part
fails, never skips.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file

from polar_cli.client import ServeError
from polar_cli.inference.servers import PROBE_IDS
from tests.integration.serve.serve_process import DEMO_IDS, MANIFEST, service
from tests.support.models import QWEN3_TINY_DIR
from tests.support.vllm_server import DEFAULT_ARGS, VLLMServer

pytestmark = pytest.mark.integration

TIMEOUT = 600


@pytest.fixture(scope="module")
def vllm_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VLLMServer]:
    """A vLLM of its own (the shared one must keep its weights), with the dev-mode reload routes, in fp32."""
    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    args = (*DEFAULT_ARGS, "--dtype", "float32", "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
    server = VLLMServer(QWEN3_TINY_DIR, "qwen3-tiny", log_path=log, extra_args=args, env={"VLLM_SERVER_DEV_MODE": "1"})
    with server:
        yield server


def checkpoint(dest: Path, seed: int, *, embeddings: bool = False) -> Path:
    """The tiny model's weights moved by noise, as an optimizer step would save them (the tied embedding matrix
    kept, unless ``embeddings``)."""
    shutil.copytree(QWEN3_TINY_DIR, dest)
    weights = load_file(str(QWEN3_TINY_DIR / "model.safetensors"))
    noise = torch.Generator().manual_seed(seed)
    moved = {
        k: v
        if "embed" in k and not embeddings
        else (v.float() + 0.05 * torch.randn(v.shape, generator=noise)).to(v.dtype)
        for k, v in weights.items()
    }
    save_file(moved, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


def trainer_probe(model_dir: Path) -> list[float]:
    """The trainer's own log-probabilities of the probe (transformers, fp32), as vLLM's ``prompt_logprobs`` gives
    them."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    with torch.no_grad():
        logps = torch.log_softmax(model(torch.tensor([list(PROBE_IDS)])).logits[0].float(), -1)
    return [logps[i - 1, PROBE_IDS[i]].item() for i in range(1, len(PROBE_IDS))]


def test_a_checkpoint_reaches_the_real_engine_and_later_samples_carry_its_version(
    vllm_dev: VLLMServer, tmp_path: Path
) -> None:
    step1 = checkpoint(tmp_path / "step-1", seed=1)
    engine = {
        "kind": "vllm",
        "url": vllm_dev.url,
        "tokenizer": str(QWEN3_TINY_DIR),
        "token_in": False,
        "max_tokens_cap": 16,
    }
    with service(tmp_path / "serve", engine, extra={"timeouts": {"session": 240, "eval": 600}}) as svc:
        listed = svc.client.engines()
        assert [(e["url"], e["kind"], e["in_rotation"]) for e in listed] == [(vllm_dev.url, "vllm", True)]

        started = time.monotonic()
        # the engine must serve the trainer's weights: its probe must be what transformers computes from them
        report = svc.client.set_weights("step-1", str(step1), expect_probe=trainer_probe(step1))
        wall = time.monotonic() - started
        (loaded,) = report["engines"]
        assert loaded["error"] is None and loaded["served_version"] == "step-1" and report["retired"] == []
        assert loaded["moved"] > 1e-2 and loaded["off_trainer"] < 1e-3, loaded
        assert httpx.get(vllm_dev.url + "/weight_info").json()["weight_version"] == "step-1"
        assert [e["weight_version"] for e in svc.client.engines()] == ["step-1"]
        assert svc.client.status()["paused"] is None
        print(f"\nsync of the tiny model: {report['seconds']} (wall {wall:.2f} s)")

        # a session after the sync: every call it made was sampled under step-1
        svc.client.submit(
            {
                "task_id": "after-sync",
                "instance": {"manifest": str(MANIFEST), "instance_id": DEMO_IDS[0]},
                "num_samples": 1,
                "harness": "pi",
                "evaluator": {"type": "session_completed"},
                "trainer": {"rows": "main"},
            }
        )
        (session,) = svc.client.wait("after-sync", timeout=TIMEOUT).sessions
        assert session["status"] in ("completed", "timeout") and session["weight_versions"] == ["step-1"], session
        assert not session["off_policy"] and len(session["traces"]) == 1
        assert session["traces"][0]["weight_versions"] == ["step-1"]

        # a checkpoint vLLM reloads without serving it: the only engine leaves the rotation, the service stays paused
        step2 = checkpoint(tmp_path / "step-2", seed=2, embeddings=True)
        with pytest.raises(ServeError) as failed:
            svc.client.set_weights("step-2", str(step2), expect_probe=trainer_probe(step2))
        assert failed.value.status == 502 and "stays paused" in failed.value.message
        assert svc.client.status()["paused"] == "drain"
        (engine_row,) = svc.client.engines()
        assert engine_row["in_rotation"] is False and engine_row["retired"]
        assert engine_row["weight_version"] == "step-1"  # nothing was stamped
