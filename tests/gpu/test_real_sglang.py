"""GPU tier, run on demand on a machine with a GPU and the sglang package: the real SGLang behind the gateway.

    POLAR_GPU_MODEL=/path/to/Qwen3-0.6B .venv/bin/python -m pytest -m gpu tests/gpu

Launches SGLang through Polar's own launcher (health wait, /model_info, token probe), then sends a tool-call round
trip through the gateway with the Anthropic SDK and checks the captured ids against SGLang's own /v1/tokenize. CI runs
every tier but this one (`-m "not gpu"`): SGLang cannot serve on a CPU.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import anthropic
import httpx
import pytest

from polar_cli.capture import read_session
from polar_cli.capture.store import session_file
from polar_cli.config import EngineConfig
from polar_cli.inference.engines import open_engine
from tests.support.gateway import running_gateway

pytestmark = pytest.mark.gpu

BASH = {
    "name": "Bash",
    "description": "Run a shell command",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
}


def test_real_sglang_tool_round_trip_captures_its_exact_ids(tmp_path: Path) -> None:
    model = os.environ.get("POLAR_GPU_MODEL")
    assert model, "set POLAR_GPU_MODEL to a local model directory (e.g. a Qwen3 instruct model)"
    config = EngineConfig.model_validate(
        {
            "kind": "sglang",
            "sglang": {
                "model_path": model,
                "served_model_name": "gpu-test",
                "tp_size": 1,
                "reasoning_parser": "qwen3",
                "tool_call_parser": "qwen25",
                "startup_timeout": 900,
            },
        }
    )
    handle = asyncio.run(open_engine(config, tmp_path))
    try:
        assert handle.options.dialect.name in ("sglang", "sglang-legacy")
        url = handle.upstream.base_url  # type: ignore[attr-defined]
        with running_gateway(
            url, tmp_path / "capture", dialect_name=handle.options.dialect.name, model="gpu-test"
        ) as gw:
            client = anthropic.Anthropic(base_url=gw.url, api_key=gw.open_session("gpu"), max_retries=0)
            history: list[anthropic.types.MessageParam] = [
                {"role": "user", "content": "Use the Bash tool to run `echo hi`, then tell me what it printed."}
            ]
            first = client.messages.create(model="any", max_tokens=512, messages=history, tools=[BASH])  # type: ignore[list-item]
            calls = [b for b in first.content if b.type == "tool_use"]
            if calls:
                history += [
                    {"role": "assistant", "content": first.content},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id, "content": "hi"}]},
                ]
                client.messages.create(model="any", max_tokens=256, messages=history, tools=[BASH])  # type: ignore[list-item]
            gw.flush()
            records = read_session(session_file(gw.capture_dir, "gpu"))
        for r in records:
            assert r.status == "ok" and r.normalized is not None and r.response is not None
            tokenized = httpx.post(
                url + "/v1/tokenize",
                json={"model": "gpu-test", "messages": r.normalized["messages"], "tools": r.normalized.get("tools")},
                timeout=60,
            ).json()
            assert r.prompt_ids == tokenized["tokens"]
            assert len(r.response_ids) == len(r.response_logprobs) == r.response["usage"]["completion_tokens"]
    finally:
        asyncio.run(handle.close())


def test_real_sglang_takes_token_in_continuations_exactly(tmp_path: Path) -> None:
    """Token-in on the real server: SGLang runs the input_ids the gateway sends; the session merges into one trace."""
    from polar_cli.gateway.continuation import TokenIn
    from polar_cli.inference.tokenizers import ChatTokenizer
    from polar_cli.trajectory import prefix_merging

    model = os.environ.get("POLAR_GPU_MODEL")
    assert model, "set POLAR_GPU_MODEL to a local model directory (e.g. a Qwen3 instruct model)"
    config = EngineConfig.model_validate(
        {
            "kind": "sglang",
            "sglang": {"model_path": model, "served_model_name": "gpu-test", "tool_call_parser": "qwen25"},
            "token_in": True,
        }
    )
    handle = asyncio.run(open_engine(config, tmp_path))
    tk = ChatTokenizer.load(model)
    try:
        url = handle.upstream.base_url  # type: ignore[attr-defined]
        with running_gateway(
            url,
            tmp_path / "capture",
            dialect_name=handle.options.dialect.name,
            model="gpu-test",
            token_in=TokenIn(tk.template, tk.vocab, tk.turn_ends),
            traits=handle.traits,
        ) as gw:
            client = anthropic.Anthropic(base_url=gw.url, api_key=gw.open_session("gpu"), max_retries=0)
            history: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Say one word."}]
            for word in ("next", "again"):
                reply = client.messages.create(model="any", max_tokens=64, messages=history)
                history += [
                    {"role": "assistant", "content": reply.content},
                    {"role": "user", "content": f"Now say {word}."},
                ]
            gw.flush()
            records = read_session(session_file(gw.capture_dir, "gpu"))
        assert [r.prompt_mode for r in records] == ["rendered", "token_in"], [r.prompt_note for r in records]
        assert records[1].prompt_ids[: len(records[0].prompt_ids) + len(records[0].response_ids)] == [
            *records[0].prompt_ids,
            *records[0].response_ids,
        ]
        assert len(prefix_merging(records).traces) == 1
    finally:
        asyncio.run(handle.close())
