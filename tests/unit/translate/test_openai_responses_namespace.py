"""Codex's ``namespace`` tools through the Responses codec, on a real recorded Codex request, with the official SDK.

Codex 0.171 given a model name it has no metadata for sends its multi-agent tools as
``{"type": "namespace", "name": "multi_agent_v1", "tools": [...]}`` (and MCP servers' tools one namespace per server);
it reads the model's call back as ``function_call`` with the inner ``name`` and a separate ``namespace``
(codex-rs ``core/src/tools/router.rs``). The SDK talks to an httpx.MockTransport that runs the codec.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai.types.responses import Response

from polar_cli.errors import RequestError
from polar_cli.translate import ir
from polar_cli.translate.codec import Route
from polar_cli.translate.openai_responses import CODEC
from polar_cli.translate.openai_responses_tools import flat_name
from tests.support.codex_namespaces import MULTI_AGENT, SPAWN_ARGS, SPAWN_PARAMS, codex_body

ROUTE = Route(api="openai_responses")
USAGE = ir.Usage(prompt_tokens=20, completion_tokens=9)


def completion(*calls: ir.ToolCall, text: str = "") -> ir.Completion:
    finish: ir.FinishReason = "tool_calls" if calls else "stop"
    return ir.Completion("cmpl9", "served", 1_700_000_000, text, None, calls, finish, USAGE)


class Gateway:
    """A fake gateway: decodes what the SDK sent and answers with the codec's encoding of a fixed completion."""

    def __init__(self, answer: ir.Completion) -> None:
        self.answer = answer
        self.requests: list[ir.ChatRequest] = []

    def __call__(self, http_request: httpx.Request) -> httpx.Response:
        request = CODEC.decode_request(orjson.loads(http_request.content), ROUTE)
        self.requests.append(request)
        if request.stream:
            body = b"".join(CODEC.encode_stream(request, self.answer))
            return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=CODEC.encode_response(request, self.answer))


def sdk(handler: Any) -> openai.OpenAI:
    client: Any = httpx.Client(transport=httpx.MockTransport(handler))
    return openai.OpenAI(api_key="sk-test", base_url="http://gw/v1", max_retries=0, http_client=client)


# --- decoding --------------------------------------------------------------------------------------------------


def test_codex_request_with_namespaces_is_accepted_and_flattened() -> None:
    request = CODEC.decode_request(codex_body(), ROUTE)
    names = [t.name for t in request.tools]
    # the recorded tools in order, the namespace members in place, tool_search and web_search hidden
    assert names == [
        *["exec_command", "write_stdin", "request_user_input", "apply_patch"],
        *["multi_agent_v1__spawn_agent", "multi_agent_v1__wait"],
        *["view_image", "get_goal", "create_goal", "update_goal"],
        *["mcp__github__get_issue", "mcp__github__run_query"],
    ]
    spawn = request.tools[4]
    assert spawn.namespaced == ir.Namespaced("multi_agent_v1", "spawn_agent")
    assert spawn.parameters == SPAWN_PARAMS and spawn.kind == "function"
    # the group's description reaches the model once, on its first member
    assert spawn.description == "Tools in the multi_agent_v1 namespace.\n\nStart a sub-agent."
    assert request.tools[5].description == "Wait for agents."
    query = request.tools[-1]
    assert (query.kind, query.namespaced) == ("custom", ir.Namespaced("mcp__github", "run_query"))
    assert query.parameters == ir.custom_tool_parameters()


def test_flat_names_follow_codex_and_never_collide() -> None:
    assert flat_name("mcp__github", "get_issue") == "mcp__github__get_issue"
    assert flat_name("mcp__weather__", "_forecast") == "mcp__weather__forecast"  # codex trims around the joint
    body = {
        "model": "m",
        "input": "x",
        "tools": [
            MULTI_AGENT,
            {"type": "function", "name": "multi_agent_v1__spawn_agent"},
            {"type": "namespace", "name": "multi_agent_v1_", "description": "", "tools": [MULTI_AGENT["tools"][0]]},
        ],
    }
    names = [t.name for t in CODEC.decode_request(body, ROUTE).tools]
    assert names == [
        "multi_agent_v1__spawn_agent_2",
        "multi_agent_v1__wait",
        "multi_agent_v1__spawn_agent",
        "multi_agent_v1__spawn_agent_3",
    ]
    assert len(set(names)) == len(names)


@pytest.mark.parametrize(
    ("tool", "message"),
    [
        ({"type": "namespace", "name": "n"}, "tools[0].tools: required"),
        ({"type": "namespace", "tools": []}, "tools[0].name: required"),
        (
            {"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]},
            "tools[0].tools[0].type: unsupported tool type 'web_search'",
        ),
        ({"type": "teleport", "name": "t"}, "tools[0].type: unsupported tool type 'teleport'"),
    ],
)
def test_malformed_namespaces_and_unknown_types_are_refused(tool: dict[str, Any], message: str) -> None:
    with pytest.raises(RequestError) as info:
        CODEC.decode_request({"model": "m", "input": "x", "tools": [tool]}, ROUTE)
    assert (info.value.message, info.value.status) == (message, 400)


# --- the answer, non-streaming and streaming -------------------------------------------------------------------


def test_namespaced_call_goes_back_with_its_namespace() -> None:
    answer = completion(
        ir.ToolCall("call_n1", "multi_agent_v1__spawn_agent", SPAWN_ARGS),
        ir.ToolCall("call_n2", "exec_command", '{"cmd": "ls"}'),
        ir.ToolCall("call_n3", "mcp__github__run_query", '{"input": "{ viewer { login } }"}', "custom"),
    )
    gateway = Gateway(answer)
    body = {k: v for k, v in codex_body().items() if k not in ("stream", "client_metadata")}
    response = sdk(gateway).responses.create(**body, stream=False)
    spawn, shell, query = response.output
    assert spawn.type == "function_call" and shell.type == "function_call" and query.type == "custom_tool_call"
    assert (spawn.name, spawn.namespace, spawn.call_id, spawn.arguments) == (
        "spawn_agent",
        "multi_agent_v1",
        "call_n1",
        SPAWN_ARGS,
    )
    assert (shell.name, shell.namespace) == ("exec_command", None)  # a plain tool carries no namespace
    assert (query.name, query.namespace, query.input) == ("run_query", "mcp__github", "{ viewer { login } }")
    raw = CODEC.encode_response(gateway.requests[0], answer)
    assert "namespace" not in raw["output"][1]  # absent, not null: codex-rs reads a missing field as None
    # the echoed tools regroup the members under their namespace, and validate strictly
    parsed = Response.model_validate(raw)
    groups = [(t.type, getattr(t, "name", None)) for t in parsed.tools]
    assert ("namespace", "multi_agent_v1") in groups and ("namespace", "mcp__github") in groups
    echoed = next(t for t in raw["tools"] if t["type"] == "namespace" and t["name"] == "multi_agent_v1")
    assert [t["name"] for t in echoed["tools"]] == ["spawn_agent", "wait"]


def test_namespaced_call_streams_with_its_namespace() -> None:
    answer = completion(ir.ToolCall("call_s1", "multi_agent_v1__spawn_agent", SPAWN_ARGS))
    gateway = Gateway(answer)
    body = {k: v for k, v in codex_body().items() if k not in ("stream", "client_metadata")}
    with sdk(gateway).responses.stream(**body) as stream:
        events = list(stream)
        final = stream.get_final_response()
    (call,) = final.output
    assert call.type == "function_call"
    assert (call.name, call.namespace, call.arguments) == ("spawn_agent", "multi_agent_v1", SPAWN_ARGS)
    # Codex acts on output_item.done; the announcement and the arguments events name the inner tool too
    items = [e.item for e in events if e.type in ("response.output_item.added", "response.output_item.done")]
    assert [(i.name, getattr(i, "namespace", None)) for i in items] == [("spawn_agent", "multi_agent_v1")] * 2
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [(e.name, e.arguments) for e in done] == [("spawn_agent", SPAWN_ARGS)]


# --- the next request ------------------------------------------------------------------------------------------


def test_next_request_maps_the_namespaced_call_back() -> None:
    body = codex_body("codex_tool", 5)
    body["input"] += [
        {"type": "function_call", "id": "fc_n1", "status": "completed", "call_id": "call_n1", "name": "spawn_agent",
         "namespace": "multi_agent_v1", "arguments": SPAWN_ARGS},
        {"type": "function_call_output", "call_id": "call_n1", "output": "agent a1 started"},
        {"type": "custom_tool_call", "call_id": "call_n3", "name": "run_query", "namespace": "mcp__github",
         "input": "{ viewer { login } }"},
        {"type": "custom_tool_call_output", "call_id": "call_n3", "output": "octocat"},
        # a namespace no longer offered (a deferred MCP server) still gets Codex's flat spelling
        {"type": "function_call", "call_id": "call_n4", "name": "forecast", "namespace": "mcp__weather__",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_n4", "output": "sunny"},
    ]  # fmt: skip
    gateway = Gateway(completion(text="Started."))
    sent = {k: v for k, v in body.items() if k not in ("stream", "client_metadata")}
    response = sdk(gateway).responses.create(**sent, stream=False)
    assert response.output_text == "Started."
    messages = gateway.requests[0].messages
    assert [m.role for m in messages[-6:]] == ["assistant", "tool"] * 3
    spawn, query, weather = messages[-6], messages[-4], messages[-2]
    assert spawn.tool_calls == (ir.ToolCall("call_n1", "multi_agent_v1__spawn_agent", SPAWN_ARGS),)
    ((query_call),) = query.tool_calls
    assert (query_call.name, query_call.kind) == ("mcp__github__run_query", "custom")
    assert json.loads(query_call.arguments) == {"input": "{ viewer { login } }"}
    assert weather.tool_calls[0].name == "mcp__weather__forecast"
    # each result names the flat tool the upstream was offered
    assert [(m.tool_call_id, m.name) for m in messages if m.role == "tool"][-3:] == [
        ("call_n1", "multi_agent_v1__spawn_agent"),
        ("call_n3", "mcp__github__run_query"),
        ("call_n4", "mcp__weather__forecast"),
    ]


def test_forced_namespaced_tool_choice_uses_the_flat_name() -> None:
    body = {**codex_body(), "tool_choice": {"type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"}}
    request = CODEC.decode_request(body, ROUTE)
    assert request.tool_choice == ir.ToolChoice(mode="tool", name="multi_agent_v1__spawn_agent")
    echoed = CODEC.encode_response(request, completion(text="x"))["tool_choice"]
    assert echoed == {"type": "function", "name": "spawn_agent", "namespace": "multi_agent_v1"}
