"""Decoding Anthropic Messages requests: recorded Claude Code and Pi traffic, quirks, and malformed bodies."""

from __future__ import annotations

from typing import Any

import pytest

from polar_cli.errors import RequestError
from polar_cli.translate.anthropic_messages import CODEC, decode_request
from polar_cli.translate.codec import Route
from polar_cli.translate.ir import (
    ChatRequest,
    Image,
    Message,
    Reasoning,
    ResponseFormat,
    Sampling,
    Text,
    ToolCall,
    ToolChoice,
)
from tests.support.recordings import find_body, recorded

ROUTE = Route(api="anthropic_messages")
RECORDED = recorded("anthropic_messages")


def _body(harness: str, run: str, seq: int) -> dict[str, Any]:
    return find_body(RECORDED, harness, run, seq)


def _decode(**fields: Any) -> ChatRequest:
    body = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}], **fields}
    return decode_request(body, ROUTE)


def test_codec_identity() -> None:
    assert CODEC.name == "anthropic_messages"
    assert CODEC.tool_call_id_prefix == "toolu_"
    assert CODEC.decode_request is decode_request


def test_recordings_cover_both_harnesses() -> None:
    assert {r["harness"] for r in RECORDED} == {"claude-code", "pi"}
    assert len(RECORDED) == 12


@pytest.mark.parametrize("record", RECORDED, ids=lambda r: f"{r['harness']}-{r['run']}-{r['seq']}")
def test_every_recorded_request_decodes(record: dict[str, Any]) -> None:
    request = decode_request(record["body"], ROUTE)
    assert request.model == record["body"]["model"]
    assert request.stream is True
    assert request.messages[0].role == "system"
    assert len(request.tools) == len(record["body"]["tools"])


def test_claude_code_tool_round_trip() -> None:
    request = decode_request(_body("claude-code", "claude_tool", 2), ROUTE)

    assert [m.role for m in request.messages] == ["system", "user", "system", "assistant", "tool"]
    system, user, system_turn, assistant, tool = request.messages
    # The billing header (system block 0) is gone; the two real blocks stay as separate parts.
    assert len(system.content) == 2
    assert system.content[0] == Text("You are a Claude agent, built on Anthropic's Claude Agent SDK.")
    assert not system.text.startswith("x-anthropic-billing-header")
    assert len(user.content) == 3
    assert user.content[2] == Text("create hello.txt containing hi")
    assert system_turn.text.startswith("# Environment\nYou have been invoked in the following environment")
    assert assistant == Message(
        role="assistant",
        tool_calls=(
            ToolCall(
                id="toolu_9ec400e08c0c4106bfe4",
                name="Bash",
                arguments='{"command": "echo hi > hello.txt", "description": "Create hello.txt"}',
            ),
        ),
    )
    assert tool == Message(
        role="tool",
        content=(Text("(Bash completed with no output)"),),
        tool_call_id="toolu_9ec400e08c0c4106bfe4",
        name="Bash",
    )
    assert [t.name for t in request.tools] == [
        "Agent",
        "Bash",
        "Edit",
        "ListAgents",
        "Read",
        "ReportFindings",
        "ScheduleWakeup",
        "Skill",
        "ToolSearch",
        "Workflow",
        "DeferredToolPlaceholder",
        "Write",
    ]
    assert request.tool("Bash") is not None
    assert request.tool("Bash").parameters["required"] == ["command"]  # type: ignore[union-attr]
    assert request.reasoning == Reasoning(enabled=True, effort="medium")
    assert request.sampling == Sampling(max_tokens=128000)
    assert request.tool_choice is None
    assert request.parallel_tool_calls is None


def test_claude_code_first_call_ends_with_system_turn() -> None:
    request = decode_request(_body("claude-code", "claude_text", 1), ROUTE)
    assert [m.role for m in request.messages] == ["system", "user", "system"]
    assert request.messages[-1].text.startswith("# Environment")


def test_pi_tool_round_trip() -> None:
    request = decode_request(_body("pi", "pi_tool_ant", 2), ROUTE)

    assert [m.role for m in request.messages] == ["system", "user", "assistant", "tool"]
    assert request.messages[0].text.startswith("You are an expert coding assistant operating inside pi")
    assert request.messages[2].tool_calls == (
        ToolCall(id="toolu_ebb846ed35a84b3ebcad", name="bash", arguments='{"command": "echo hi > hello.txt"}'),
    )
    assert request.messages[3] == Message(
        role="tool", content=(Text("(no output)"),), tool_call_id="toolu_ebb846ed35a84b3ebcad", name="bash"
    )
    assert [t.name for t in request.tools] == ["read", "bash", "edit", "write"]
    assert request.reasoning == Reasoning(enabled=True, budget_tokens=8192)
    assert request.sampling.max_tokens == 16384


# --- quirks ---------------------------------------------------------------------------------------------------------


def test_quirk_billing_header_dropped_only_from_top_level_system() -> None:
    header = {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332; cc_entrypoint=sdk-cli;"}
    request = _decode(system=[header, {"type": "text", "text": "Be brief."}])
    assert request.messages[0] == Message(role="system", content=(Text("Be brief."),))
    assert [m.role for m in _decode(system=[header]).messages] == ["user"]


def test_quirk_system_turn_kept_in_place() -> None:
    request = _decode(
        messages=[
            {"role": "user", "content": "one"},
            {"role": "system", "content": [{"type": "text", "text": "env"}], "output_config": {"effort": "low"}},
            {"role": "assistant", "content": "two"},
        ]
    )
    assert request.messages == (
        Message(role="user", content=(Text("one"),)),
        Message(role="system", content=(Text("env"),)),
        Message(role="assistant", content=(Text("two"),)),
    )


def test_quirk_tool_reference_reads_as_text() -> None:
    result = {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "tool_reference", "tool_name": "Grep"}]}
    request = _decode(messages=[{"role": "user", "content": [result]}])
    assert request.messages == (Message(role="tool", content=(Text("Tool loaded: Grep"),), tool_call_id="t1"),)


# --- content --------------------------------------------------------------------------------------------------------


def test_tool_results_come_before_the_rest_of_the_user_turn() -> None:
    png = {"type": "base64", "media_type": "image/png", "data": "iVBOR"}
    request = _decode(
        messages=[
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "note"},
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "a"}]},
                    {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                    {
                        "type": "tool_result",
                        "tool_use_id": "t2",
                        "is_error": True,
                        "content": [{"type": "text", "text": "boom"}, {"type": "image", "source": png}],
                    },
                ],
            },
        ]
    )
    assert request.messages[1:] == (
        Message(role="tool", content=(Text("a"),), tool_call_id="t1", name="Read"),
        Message(
            role="tool",
            content=(Text("boom"), Image("data:image/png;base64,iVBOR")),
            tool_call_id="t2",
            is_error=True,
        ),
        Message(role="user", content=(Text("note"), Image("https://x/y.png"))),
    )
    assert request.messages[0].tool_calls == (ToolCall(id="t1", name="Read", arguments="{}"),)


def test_tool_result_without_content_is_empty() -> None:
    request = _decode(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}])
    assert request.messages == (Message(role="tool", tool_call_id="t"),)


def test_assistant_thinking_text_and_calls() -> None:
    request = _decode(
        messages=[
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "first", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "Running it."},
                    {"type": "tool_use", "id": "a", "name": "Bash", "input": {"command": "ls", "n": "é"}},
                    {"type": "thinking", "thinking": "second", "signature": ""},
                    {"type": "tool_use", "id": "b", "name": "Read", "input": {"path": "/x"}},
                ],
            }
        ]
    )
    assert request.messages == (
        Message(
            role="assistant",
            content=(Text("Running it."),),
            reasoning="first\nsecond",
            tool_calls=(
                ToolCall(id="a", name="Bash", arguments='{"command": "ls", "n": "é"}'),
                ToolCall(id="b", name="Read", arguments='{"path": "/x"}'),
            ),
        ),
    )


def test_documents_and_search_results_become_text() -> None:
    request = _decode(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"}},
                    {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "c"}]}},
                    {
                        "type": "search_result",
                        "source": "https://s",
                        "title": "T",
                        "content": [{"type": "text", "text": "hit"}],
                    },
                ],
            }
        ]
    )
    assert request.messages == (Message(role="user", content=(Text("doc"), Text("c"), Text("hit"))),)


def test_thinking_without_text_is_no_reasoning() -> None:
    blocks = [
        {"type": "thinking", "signature": "s"},
        {"type": "thinking", "thinking": ""},
        {"type": "text", "text": "ok"},
    ]
    request = _decode(messages=[{"role": "assistant", "content": blocks}])
    assert request.messages == (Message(role="assistant", content=(Text("ok"),)),)


def test_system_as_string() -> None:
    assert _decode(system="Be brief.").messages[0] == Message(role="system", content=(Text("Be brief."),))


# --- tools and parameters -------------------------------------------------------------------------------------------


def test_tools_skip_server_tools_and_keep_deferred_ones() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    request = _decode(
        tools=[
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
            {"name": "Find", "description": "find", "input_schema": schema, "defer_loading": True},
            {"type": "custom", "name": "Plain", "input_schema": schema, "cache_control": {"type": "ephemeral"}},
        ]
    )
    assert [(t.name, t.description, t.kind) for t in request.tools] == [
        ("Find", "find", "function"),
        ("Plain", "", "function"),
    ]
    assert request.tools[0].parameters == schema


def test_tools_hide_dated_server_tools_and_refuse_unknown_types() -> None:
    schema = {"type": "object"}
    hidden = [
        {"type": "tool_search_tool_regex_20251119", "name": "tool_search"},
        {"type": "mcp_toolset", "mcp_server_name": "github"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
    ]
    assert [t.name for t in _decode(tools=[*hidden, {"name": "Read", "input_schema": schema}]).tools] == ["Read"]
    # one policy in every API module: an unknown type is a 400 naming it, never silently dropped
    for tool in ({"type": "teleport", "name": "t"}, {"type": "teleport", "name": "t", "input_schema": schema}):
        with pytest.raises(RequestError) as info:
            _decode(tools=[{"name": "Read", "input_schema": schema}, tool])
        assert (info.value.message, info.value.status) == ("tools[1].type: unsupported tool type 'teleport'", 400)


@pytest.mark.parametrize(
    ("choice", "expected", "parallel"),
    [
        ({"type": "auto"}, ToolChoice(mode="auto"), None),
        ({"type": "any", "disable_parallel_tool_use": True}, ToolChoice(mode="required"), False),
        ({"type": "tool", "name": "Bash"}, ToolChoice(mode="tool", name="Bash"), None),
        ({"type": "none"}, ToolChoice(mode="none"), None),
        ({"type": "auto", "disable_parallel_tool_use": False}, ToolChoice(mode="auto"), True),
    ],
)
def test_tool_choice(choice: dict[str, Any], expected: ToolChoice, parallel: bool | None) -> None:
    request = _decode(tool_choice=choice)
    assert request.tool_choice == expected
    assert request.parallel_tool_calls is parallel


def test_sampling_parameters() -> None:
    request = _decode(max_tokens=64, temperature=1, top_p=0.9, top_k=40, stop_sequences=["END", "\n\nHuman:"])
    assert request.sampling == Sampling(max_tokens=64, temperature=1.0, top_p=0.9, top_k=40, stop=("END", "\n\nHuman:"))
    assert isinstance(request.sampling.temperature, float)


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, None),
        ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, Reasoning(enabled=True, budget_tokens=2048)),
        ({"thinking": {"type": "disabled"}}, Reasoning(enabled=False)),
        ({"thinking": {"type": "adaptive", "display": "omitted"}}, Reasoning(enabled=True)),
        ({"output_config": {"effort": "low"}}, Reasoning(effort="low")),
        ({"output_config": {"effort": "max"}, "thinking": {"type": "adaptive"}}, Reasoning(True, "high")),
        ({"output_config": {"effort": "xhigh"}}, Reasoning(effort="high")),
    ],
)
def test_reasoning(fields: dict[str, Any], expected: Reasoning | None) -> None:
    assert _decode(**fields).reasoning == expected


def test_structured_output_format() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"type": "json_schema", "schema": schema}
    assert _decode(output_config={"format": fmt}).response_format == ResponseFormat(type="json_schema", schema=schema)
    assert _decode(output_format=fmt).response_format == ResponseFormat(type="json_schema", schema=schema)
    assert _decode().response_format is None


def test_ignored_fields_do_not_matter() -> None:
    plain = _decode()
    noisy = _decode(metadata={"user_id": "{}"}, context_management={"edits": []}, service_tier="auto")
    assert noisy == plain
    assert plain.stream is False


# --- malformed bodies -----------------------------------------------------------------------------------------------


def _user(*blocks: Any) -> list[dict[str, Any]]:
    return [{"role": "user", "content": list(blocks)}]


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model": None}, "model: required"),
        ({"model": 3}, "model: expected a string, got number"),
        ({"messages": None}, "messages: required"),
        ({"messages": "hi"}, "messages: expected an array, got string"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role: expected 'user', 'assistant' or"),
        ({"messages": [{"role": "user"}]}, "messages[0].content: required"),
        ({"messages": _user({"type": "audio"})}, "messages[0].content[0].type: unsupported block type 'audio'"),
        ({"messages": _user({"text": "x"})}, "messages[0].content[0].type: required"),
        ({"messages": _user({"type": "text", "text": 5})}, "messages[0].content[0].text: expected a string"),
        ({"messages": _user("plain")}, "messages[0].content[0]: expected an object, got string"),
        (
            {"messages": _user({"type": "tool_use", "id": "a", "name": "b", "input": {}})},
            "messages[0].content[0].type: unsupported block type 'tool_use' in a user turn",
        ),
        ({"messages": _user({"type": "tool_result"})}, "messages[0].content[0].tool_use_id: required"),
        (
            {"messages": _user({"type": "tool_result", "tool_use_id": "t", "is_error": "no"})},
            "messages[0].content[0].is_error: expected a boolean, got string",
        ),
        (
            {"messages": _user({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "video"}]})},
            "messages[0].content[0].content[0].type: unsupported block type 'video' in a tool_result",
        ),
        (
            {"messages": _user({"type": "image", "source": {"type": "file", "file_id": "f"}})},
            "messages[0].content[0].source.type: unsupported image source 'file'",
        ),
        (
            {"messages": _user({"type": "document", "source": {"type": "base64", "data": "JVBE"}})},
            "messages[0].content[0].source.type: unsupported document source 'base64'",
        ),
        (
            {
                "messages": [
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": []}]}
                ]
            },
            "messages[0].content[0].input: expected an object, got array",
        ),
        (
            {"messages": [{"role": "assistant", "content": [{"type": "image", "source": {}}]}]},
            "messages[0].content[0].type: unsupported block type 'image' in an assistant turn",
        ),
        ({"system": [{"type": "image"}]}, "system[0].type: unsupported block type 'image' in a system prompt"),
        ({"max_tokens": "10"}, "max_tokens: expected an integer, got string"),
        ({"max_tokens": True}, "max_tokens: expected an integer, got boolean"),
        ({"temperature": "hot"}, "temperature: expected a number, got string"),
        ({"stop_sequences": ["a", 1]}, "stop_sequences[1]: expected a string, got number"),
        ({"tools": [{"name": "x"}]}, "tools[0].input_schema: required"),
        ({"tools": {"name": "x"}}, "tools: expected an array, got object"),
        ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type: expected 'auto', 'any', 'tool' or 'none'"),
        ({"tool_choice": {"type": "tool"}}, "tool_choice.name: required"),
        ({"thinking": {"type": "deep"}}, "thinking.type: expected 'enabled', 'adaptive' or 'disabled'"),
        ({"thinking": {"type": "enabled", "budget_tokens": 1.5}}, "thinking.budget_tokens: expected an integer"),
        ({"output_config": {"effort": "extreme"}}, "output_config.effort: expected one of low, medium, high"),
        ({"output_config": {"format": {"type": "regex"}}}, "output_config.format.type: expected 'json_schema'"),
        ({"stream": "yes"}, "stream: expected a boolean, got string"),
    ],
)
def test_malformed_body(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(RequestError) as info:
        _decode(**fields)
    assert info.value.message.startswith(message)
    assert info.value.status == 400
    assert info.value.kind == "invalid_request"


@pytest.mark.parametrize("body", [[], "x", None, 3])
def test_body_must_be_an_object(body: Any) -> None:
    with pytest.raises(RequestError, match="body: expected a JSON object"):
        decode_request(body, ROUTE)
