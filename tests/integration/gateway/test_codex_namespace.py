"""Codex's ``namespace`` tools through a real gateway and an SGLang double, with the official openai SDK as client.

A recorded Codex request with an unknown model name's tools (``multi_agent_v1`` at ``tools[4]``, an MCP server's
namespace at the end) is accepted; the upstream is offered flat functions; the scripted model calls one; the SDK
reads back ``name`` + ``namespace`` (what codex-rs routes on), streamed and not; the next request, carrying the
call and its ``function_call_output``, reaches the upstream under the flat name again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.support.codex_namespaces import SPAWN_ARGS, codex_body
from tests.support.gateway import RunningGateway, running_gateway
from tests.support.sglang_double import Reply, SGLangDouble, ToolCallReply


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[SGLangDouble, RunningGateway]]:
    with (
        SGLangDouble(dialect="sglang") as upstream,
        running_gateway(upstream.url, tmp_path / "capture", model="polar-test-model") as gw,
    ):
        yield upstream, gw


def sdk_body(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k not in ("stream", "client_metadata")}


@pytest.mark.parametrize("streamed", [False, True])
def test_codex_namespace_round_trip(stack: tuple[SGLangDouble, RunningGateway], streamed: bool) -> None:
    upstream, gw = stack
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key=gw.open_session(f"ns-{streamed}"), max_retries=0)
    upstream.add(
        Reply(tool_calls=(ToolCallReply("multi_agent_v1__spawn_agent", json.loads(SPAWN_ARGS)),)),
        Reply("Started."),
    )
    body = sdk_body(codex_body())
    if streamed:
        with client.responses.stream(**body) as stream:
            first = stream.get_final_response()
    else:
        first = client.responses.create(**body, stream=False)
    (call,) = first.output
    assert call.type == "function_call"
    assert (call.name, call.namespace, json.loads(call.arguments)) == (
        "spawn_agent",
        "multi_agent_v1",
        {"message": "list the files"},
    )
    offered = [t["function"]["name"] for t in upstream.chat_requests[-1].body["tools"]]
    assert "multi_agent_v1__spawn_agent" in offered and "mcp__github__get_issue" in offered
    assert "tool_search" not in offered and "web_search" not in offered

    body["input"] = [
        *body["input"],
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "namespace": call.namespace,
         "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "agent a1 started"},
    ]  # fmt: skip
    second = client.responses.create(**body, stream=False)
    assert second.output_text == "Started."
    sent = upstream.chat_requests[-1].body["messages"]
    assert sent[-2]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"
    assert sent[-1]["role"] == "tool" and sent[-1]["tool_call_id"] == call.call_id
    upstream.assert_no_rejections()
