"""Decoding OpenAI Chat Completions requests: recorded Qwen Code, opencode and Pi traffic, quirks, malformed bodies."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from polar_cli.errors import RequestError
from polar_cli.translate import ir
from polar_cli.translate.codec import Route
from polar_cli.translate.ir import Image, Message, Reasoning, ResponseFormat, Sampling, Text, ToolCall, ToolChoice
from polar_cli.translate.openai_chat import CODEC, decode_request
from tests.support.recordings import find_body, recorded

ROUTE = Route(api="openai_chat")
RECORDED = recorded("openai_chat")


def _body(harness: str, run: str, seq: int) -> dict[str, Any]:
    return find_body(RECORDED, harness, run, seq)


def _decode(**fields: Any) -> ir.ChatRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    return decode_request(body, ROUTE)


def _history(*messages: dict[str, Any]) -> tuple[Message, ...]:
    return _decode(messages=list(messages)).messages


def test_codec_identity() -> None:
    assert CODEC.name == "openai_chat"
    assert CODEC.tool_call_id_prefix == "call_"
    assert CODEC.decode_request is decode_request


def test_recordings_cover_all_three_harnesses() -> None:
    assert {r["harness"] for r in RECORDED} == {"qwen-code", "opencode", "pi"}
    assert len(RECORDED) == 34


@pytest.mark.parametrize("record", RECORDED, ids=lambda r: f"{r['harness']}-{r['run']}-{r['seq']}")
def test_every_recorded_request_decodes(record: dict[str, Any]) -> None:
    body = record["body"]
    request = decode_request(body, ROUTE)
    assert request.model == body["model"]
    assert request.stream is True
    assert request.include_usage is True
    assert len(request.messages) == len(body["messages"])
    assert request.messages[0].role == "system"
    assert len(request.tools) == len(body.get("tools", []))
    assert request.sampling.max_tokens == body.get("max_tokens", body.get("max_completion_tokens"))


def test_qwen_code_tool_round_trip_and_list_tool_content() -> None:
    request = decode_request(_body("qwen-code", "qwen_tool", 4), ROUTE)
    system, user, assistant, tool = request.messages
    assert system.role == "system" and system.text.startswith("You are Qwen Code")
    assert len(user.content) == 5 and all(isinstance(p, Text) for p in user.content)
    assert user.content[-1] == Text("create hello.txt containing hi")
    assert assistant == Message(
        role="assistant",
        tool_calls=(
            ToolCall(
                id="call_5dbb3e0f3eff40eba5be",
                name="run_shell_command",
                arguments='{"command":"echo hi > hello.txt","description":"Create hello.txt"}',
            ),
        ),
    )
    assert tool.role == "tool" and tool.tool_call_id == "call_5dbb3e0f3eff40eba5be"
    assert len(tool.content) == 1 and tool.text.startswith("Command: echo hi > hello.txt\nDirectory: (root)")
    assert request.sampling == Sampling(max_tokens=32768)
    assert request.tool_choice is None and request.reasoning is None
    assert request.tools[0].name == "agent" and request.tools[0].parameters["required"] == ["description", "prompt"]


def test_pi_tool_round_trip() -> None:
    request = decode_request(_body("pi", "pi_tool_oai", 2), ROUTE)
    _, user, assistant, tool = request.messages
    assert user.content == (Text("create hello.txt containing hi"),)
    assert assistant.content == ()
    assert assistant.tool_calls == (
        ToolCall(id="call_174528fa9724443db6fb", name="bash", arguments='{"command":"echo hi > hello.txt"}'),
    )
    assert tool == Message(role="tool", content=(Text("(no output)"),), tool_call_id="call_174528fa9724443db6fb")
    assert request.sampling.max_tokens == 16384  # from max_completion_tokens
    assert [t.name for t in request.tools] == ["read", "bash", "edit", "write"]


def test_opencode_tool_round_trip_and_title_call() -> None:
    request = decode_request(_body("opencode", "opencode_tool", 3), ROUTE)
    assert request.tool_choice == ToolChoice(mode="auto")
    _, user, assistant, tool = request.messages
    assert user.content == (Text('"create hello.txt containing hi"'),)
    assert assistant.content == () and assistant.tool_calls[0].name == "bash"
    assert tool.tool_call_id == "call_e4f2e39f15574a36934a" and tool.text == "(no output)"
    title = decode_request(_body("opencode", "opencode_tool", 1), ROUTE)
    assert title.tools == () and title.tool_choice is None
    assert [m.role for m in title.messages] == ["system", "user", "user"]
    assert title.messages[0].text.startswith("You are a title generator")


def test_join_tool_text_parts_quirk_joins_several_parts() -> None:
    tool = {"type": "text", "text": "a"}, {"type": "text", "text": "b"}
    messages = _history(
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": list(tool)},
    )
    assert messages[1].content == (Text("a\nb"),)
    assert messages[0].tool_calls[0].arguments == "{}"  # missing arguments read as an empty object


def test_roles_and_content_shapes() -> None:
    messages = _history(
        {"role": "developer", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "system", "content": "sys", "name": "ignored"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "no"}, {"type": "refusal", "refusal": "!"}]},
        {"role": "user", "content": None},
    )
    assert messages == (
        Message(role="system", content=(Text("be brief"),)),
        Message(role="system", content=(Text("sys"),)),
        Message(role="user", content=(Text("look"), Image("data:image/png;base64,AAAA"))),
        Message(role="assistant", content=(Text("no"), Text("!"))),
        Message(role="user"),
    )


def test_assistant_reasoning_fields() -> None:
    first, second, third = _history(
        {"role": "assistant", "content": "a", "reasoning_content": "thought one"},
        {"role": "assistant", "content": "b", "reasoning": "thought two"},
        {"role": "assistant", "content": "c", "reasoning_content": ""},
    )
    assert (first.reasoning, second.reasoning, third.reasoning) == ("thought one", "thought two", None)


def test_custom_tool_call_in_history() -> None:
    (assistant,) = _history(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "call_p", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin"}}],
        }
    )
    call = assistant.tool_calls[0]
    assert call == ToolCall(id="call_p", name="apply_patch", arguments='{"input":"*** Begin"}', kind="custom")
    assert ir.custom_input(call) == "*** Begin"


def test_legacy_function_call_and_function_role() -> None:
    assistant, result = _history(
        {"role": "assistant", "content": None, "function_call": {"name": "get", "arguments": '{"a":1}'}},
        {"role": "function", "name": "get", "content": "42"},
    )
    assert assistant.tool_calls == (ToolCall(id="call_legacy_0", name="get", arguments='{"a":1}'),)
    assert result == Message(role="tool", content=(Text("42"),), tool_call_id="call_legacy_0", name="get")


def test_tools_function_custom_and_legacy_functions() -> None:
    grammar = {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: LINE+\n"}}
    request = _decode(
        tools=[
            {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "g", "strict": True}},
            {"type": "custom", "custom": {"name": "apply_patch", "description": "Patch files.", "format": grammar}},
            {"type": "custom", "custom": {"name": "free", "format": {"type": "text"}}},
        ],
        functions=[{"name": "old", "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}],
    )
    f, g, patch, free, old = request.tools
    assert f == ir.Tool(name="f", description="d", parameters={"type": "object"})
    assert g == ir.Tool(name="g")
    assert patch.kind == "custom" and patch.parameters == ir.custom_tool_parameters()
    assert patch.description.startswith("Patch files.\n\n")
    assert "lark grammar" in patch.description and "start: LINE+" in patch.description
    assert free == ir.Tool(name="free", parameters=ir.custom_tool_parameters(), kind="custom")
    assert old.name == "old" and old.parameters["properties"] == {"x": {"type": "string"}}


@pytest.mark.parametrize(
    ("tool_choice", "expected"),
    [
        ("auto", ToolChoice(mode="auto")),
        ("none", ToolChoice(mode="none")),
        ("required", ToolChoice(mode="required")),
        ({"type": "function", "function": {"name": "f"}}, ToolChoice(mode="tool", name="f")),
        ({"type": "custom", "custom": {"name": "f"}}, ToolChoice(mode="tool", name="f")),
    ],
)
def test_tool_choice(tool_choice: Any, expected: ToolChoice) -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert _decode(tools=tools, tool_choice=tool_choice).tool_choice == expected


def test_legacy_function_call_choice() -> None:
    functions = [{"name": "f"}]
    assert _decode(functions=functions, function_call={"name": "f"}).tool_choice == ToolChoice(mode="tool", name="f")
    assert _decode(functions=functions, function_call="none").tool_choice == ToolChoice(mode="none")


def test_sampling_parameters() -> None:
    request = _decode(
        max_tokens=10,
        max_completion_tokens=20,
        temperature=0,
        top_p=0.9,
        top_k=20,
        min_p=0.05,
        presence_penalty=1,
        frequency_penalty=-0.5,
        seed=7,
        stop="END",
        n=1,
    )
    assert request.sampling == Sampling(
        max_tokens=20,  # max_completion_tokens wins over the deprecated max_tokens
        temperature=0.0,
        top_p=0.9,
        top_k=20,
        min_p=0.05,
        presence_penalty=1.0,
        frequency_penalty=-0.5,
        seed=7,
        stop=("END",),
    )
    assert _decode(stop=["a", "b"]).sampling.stop == ("a", "b")
    assert _decode(max_tokens=5).sampling.max_tokens == 5


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, None),
        ({"reasoning_effort": "high"}, Reasoning(enabled=True, effort="high")),
        ({"reasoning_effort": "xhigh"}, Reasoning(enabled=True, effort="high")),
        ({"reasoning_effort": "minimal"}, Reasoning(enabled=True, effort="minimal")),
        ({"reasoning_effort": "none"}, Reasoning(enabled=False)),
        ({"enable_thinking": False}, Reasoning(enabled=False)),
        ({"chat_template_kwargs": {"enable_thinking": True}}, Reasoning(enabled=True)),
        ({"reasoning_effort": "low", "enable_thinking": False}, Reasoning(enabled=False, effort="low")),
    ],
)
def test_reasoning(fields: dict[str, Any], expected: Reasoning | None) -> None:
    assert _decode(**fields).reasoning == expected


@pytest.mark.parametrize(
    ("response_format", "expected"),
    [
        ({"type": "text"}, None),
        ({"type": "json_object"}, ResponseFormat(type="json_object")),
        (
            {"type": "json_schema", "json_schema": {"name": "route", "schema": {"type": "object"}, "strict": True}},
            ResponseFormat(type="json_schema", schema={"type": "object"}, name="route"),
        ),
        ({"type": "json_schema", "json_schema": {"name": "loose"}}, ResponseFormat(type="json_object", name="loose")),
    ],
)
def test_response_format(response_format: dict[str, Any], expected: ResponseFormat | None) -> None:
    assert _decode(response_format=response_format).response_format == expected


def test_stream_flags_and_extras() -> None:
    plain = _decode()
    assert (plain.stream, plain.include_usage, plain.parallel_tool_calls) == (False, False, None)
    streamed = _decode(stream=True, stream_options={"include_usage": True}, parallel_tool_calls=False)
    assert (streamed.stream, streamed.include_usage, streamed.parallel_tool_calls) == (True, True, False)
    # include_usage only means something on a stream.
    assert _decode(stream=False, stream_options={"include_usage": True}).include_usage is False
    # Unknown and vendor keys are ignored, as OpenAI-compatible servers do.
    extras = _decode(store=False, user="u", metadata={"k": "v"}, logprobs=True, x_vendor={"deep": [1]})
    assert extras == plain


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model": 3}, "model: expected a string, got number"),
        ({"model": ""}, "model: required"),
        ({"messages": "hi"}, "messages: expected an array of messages, got string"),
        ({"messages": []}, "messages: must contain at least one message"),
        ({"messages": [1]}, "messages[0]: expected an object, got number"),
        ({"messages": [{"content": "x"}]}, "messages[0].role: required"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role: unsupported role 'robot'"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content: expected a string, an array"),
        ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content[0].type: unsupported"),
        (
            {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},
            "messages[0].content[0].type: 'input_audio' parts are not supported",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "f"}}]}]},
            "messages[0].content[0].type: 'file' parts are not supported",
        ),
        (
            {"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]},
            "messages[0].content[0].type: unsupported content part type 'image_url' in a system message",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text: required"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "u"}]}]},
            "messages[0].content[0].image_url: expected an object, got string",
        ),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id: required"),
        (
            {"messages": [{"role": "assistant", "tool_calls": {"id": "c"}}]},
            "messages[0].tool_calls: expected an array, got object",
        ),
        (
            {
                "messages": [
                    {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": {}}}]}
                ]
            },
            "messages[0].tool_calls[0].function.arguments: expected a string, got object",
        ),
        (
            {"messages": [{"role": "assistant", "tool_calls": [{"id": "c", "type": "mcp"}]}]},
            "messages[0].tool_calls[0].type: unsupported tool call type 'mcp'",
        ),
        (
            {"messages": [{"role": "assistant", "content": "x", "reasoning_content": ["a"]}]},
            "messages[0].reasoning_content: expected a string, got array",
        ),
        ({"tools": {}}, "tools: expected an array, got object"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type: unsupported tool type 'web_search'"),
        ({"tools": [{"type": "function"}]}, "tools[0].function: required"),
        ({"tools": [{"type": "function", "function": {"name": ""}}]}, "tools[0].function.name: must not be empty"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]},
            "tools[0].function.parameters: expected an object, got string",
        ),
        (
            {"tools": [{"type": "custom", "custom": {"name": "p", "format": {"type": "grammar"}}}]},
            "tools[0].custom.format.grammar: required",
        ),
        ({"tool_choice": "always"}, "tool_choice: expected one of 'auto', 'none', 'required'"),
        (
            {"tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice.function.name: no tool named 'nope' is offered",
        ),
        ({"tool_choice": {"type": "allowed_tools"}}, "tool_choice.type: unsupported tool_choice type 'allowed_tools'"),
        ({"max_tokens": "100"}, "max_tokens: expected an integer, got string"),
        ({"max_tokens": 0}, "max_tokens: must be at least 1, got 0"),
        ({"max_completion_tokens": 1.5}, "max_completion_tokens: expected an integer, got number"),
        ({"temperature": "hot"}, "temperature: expected a number, got string"),
        ({"temperature": True}, "temperature: expected a number, got boolean"),
        ({"top_p": 10**400}, "top_p: number out of range"),
        ({"seed": 1.0}, "seed: expected an integer, got number"),
        ({"stop": [1]}, "stop: expected a string or an array of strings, got array"),
        ({"n": 2}, "n: only 1 choice per request is supported, got 2"),
        ({"stream": "yes"}, "stream: expected a boolean, got string"),
        ({"stream_options": {"include_usage": 1}}, "stream_options.include_usage: expected a boolean, got number"),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls: expected a boolean, got string"),
        ({"response_format": {"type": "yaml"}}, "response_format.type: unsupported value 'yaml'"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema: required"),
        ({"reasoning_effort": "max"}, "reasoning_effort: unsupported value 'max'"),
        ({"reasoning_effort": 3}, "reasoning_effort: expected a string, got number"),
        ({"chat_template_kwargs": {"enable_thinking": "no"}}, "chat_template_kwargs.enable_thinking: expected a"),
        ({"modalities": ["text", "audio"]}, "modalities: audio output is not supported"),
        ({"audio": {"voice": "alloy"}}, "audio: audio output is not supported"),
    ],
)
def test_malformed_bodies_name_the_field(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(RequestError) as info:
        _decode(**fields)
    assert info.value.status == 400 and info.value.kind == "invalid_request"
    assert info.value.message.startswith(message)


def test_body_must_be_an_object() -> None:
    with pytest.raises(RequestError, match=r"^body: expected a JSON object, got array"):
        decode_request([], ROUTE)  # type: ignore[arg-type]


def test_route_model_is_the_fallback_and_route_stream_wins() -> None:
    request = decode_request({"messages": [{"role": "user", "content": "x"}]}, Route("openai_chat", "served", True))
    assert (request.model, request.stream) == ("served", True)


def test_decoded_custom_arguments_are_json() -> None:
    (assistant,) = _history(
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "p", "input": 'a"\n'}}]}
    )
    assert orjson.loads(assistant.tool_calls[0].arguments) == {"input": 'a"\n'}
