"""The node's gateway with the gold engine, over real HTTP, with Pi's recorded request: each session gets its own
instance's patch, the answer streams back in the harness's API, and the capture merges into one trace."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from polar_cli.capture import read_capture_dir
from polar_cli.config import EngineConfig
from polar_cli.inference.engines import open_engine
from polar_cli.inference.gold import GOLD_DONE, PATCH_FILE, Task
from polar_cli.node.gateway import NodeGateway
from polar_cli.trajectory import prefix_merging
from tests.support.models import QWEN3_IM_END, QWEN3_TINY_DIR

RECORDED = Path(__file__).resolve().parents[2] / "data" / "harness_requests" / "pi.jsonl"
PATCH_A = "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-old a\n+new a\n"
PATCH_B = "diff --git a/b.txt b/b.txt\n--- a/b.txt\n+++ b/b.txt\n@@ -1 +1 @@\n-old b\n+new b\n"


def pi_request() -> dict[str, Any]:
    """Pi's first OpenAI Chat request of its recorded tool run (system + user, four tools, stream: true)."""
    for line in RECORDED.read_text().splitlines():
        row = json.loads(line)
        if row["run"] == "pi_tool_oai" and len(row["body"]["messages"]) == 2:
            body: dict[str, Any] = row["body"]
            return body
    raise AssertionError("the recorded Pi tool run is missing")


def final_stream_text(sse: str) -> tuple[str, list[dict[str, Any]]]:
    """Content and tool calls reassembled from an OpenAI Chat SSE stream."""
    text, calls = "", dict[int, dict[str, str]]()
    for line in sse.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        for choice in json.loads(line[6:]).get("choices", []):
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                entry = calls.setdefault(call["index"], {"id": "", "name": "", "arguments": ""})
                entry["id"] = call.get("id") or entry["id"]
                fn = call.get("function") or {}
                entry["name"] += fn.get("name") or ""
                entry["arguments"] += fn.get("arguments") or ""
    return text, [calls[k] for k in sorted(calls)]


async def conversation(tmp_path: Path) -> dict[str, Any]:
    if not (QWEN3_TINY_DIR / "tokenizer.json").is_file():
        pytest.fail(f"{QWEN3_TINY_DIR} is missing: run scripts/setup-tests")
    # token-in: the gold engine's Qwen3 turns open with an empty think block that re-rendering would drop
    config = EngineConfig(kind="gold", tokenizer=str(QWEN3_TINY_DIR), token_in=True)
    engine = await open_engine(config, tmp_path)
    gateway = NodeGateway(engine, tmp_path / "capture")
    url = await gateway.start()
    out: dict[str, Any] = {"engine": engine}
    try:
        key_a = gateway.open_session("session-a", Task("inst-a", PATCH_A, "/testbed"))
        key_b = gateway.open_session("session-b", Task("inst-b", PATCH_B, "/testbed"))
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:

            async def call(key: str, body: dict[str, Any]) -> httpx.Response:
                return await client.post("/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"})

            first = pi_request()
            # interleaved sessions: each must get its own instance's patch
            answer_a, answer_b = await asyncio.gather(call(key_a, first), call(key_b, first))
            out["first_a"], out["first_b"] = final_stream_text(answer_a.text), final_stream_text(answer_b.text)
            _text, calls = out["first_a"]
            follow = copy.deepcopy(first)
            follow["messages"] += [
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": calls[0]["id"], "type": "function",
                     "function": {"name": calls[0]["name"], "arguments": calls[0]["arguments"]}}]},
                {"role": "tool", "tool_call_id": calls[0]["id"], "content": "Applied patch a.txt cleanly."},
            ]  # fmt: skip
            out["second_a"] = final_stream_text((await call(key_a, follow)).text)
            out["unknown"] = await call("sk-not-a-session", first)
    finally:
        await gateway.stop()
        await engine.close()
    out["capture"] = read_capture_dir(tmp_path / "capture")
    return out


def test_gold_through_the_node_gateway_per_session(tmp_path: Path) -> None:
    out = asyncio.run(conversation(tmp_path))
    for name, patch in (("first_a", PATCH_A), ("first_b", PATCH_B)):
        text, calls = out[name]
        assert text == "" and len(calls) == 1 and calls[0]["name"] == "bash"
        command = json.loads(calls[0]["arguments"])["command"]
        assert patch in command and PATCH_FILE in command and "git apply" in command
    assert out["second_a"] == (GOLD_DONE, [])
    assert out["unknown"].status_code == 401

    records = out["capture"]["session-a"]
    assert [r.status for r in records] == ["ok", "ok"]
    assert all(r.prompt_ids and r.response_ids for r in records)
    assert records[0].response_ids[-1] == QWEN3_IM_END == out["engine"].eot_token_id
    # the second prompt extends the first prompt + what was sampled: one trace, nothing drifted
    assert [r.prompt_mode for r in records] == ["rendered", "token_in"]
    build = prefix_merging(records, QWEN3_IM_END)
    assert len(build.traces) == 1 and build.stats.completions_merged == 1 and build.stats.turns_drifted == 0
    trace = build.traces[0]
    assert trace.prompt_ids == records[0].prompt_ids
    assert sum(trace.loss_mask) == len(records[0].response_ids) + len(records[1].response_ids)
