"""Shared real servers for the integration tier: one vLLM per model for the whole run (each takes ~40 s to start)."""

from __future__ import annotations

from tests.support.models import QWEN3_TINY_DIR, SMOLLM2_DIR
from tests.support.vllm_server import DEFAULT_ARGS, vllm_fixture

smollm2 = vllm_fixture(SMOLLM2_DIR, "smollm2", scope="session")
qwen3_tiny = vllm_fixture(
    QWEN3_TINY_DIR,
    "qwen3-tiny",
    extra_args=(
        *DEFAULT_ARGS,
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--reasoning-parser",
        "qwen3",
    ),
    scope="session",
)
