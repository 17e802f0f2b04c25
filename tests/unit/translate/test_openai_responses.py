"""Decoding OpenAI Responses requests: recorded Codex and Pi traffic, the item-folding rules, quirks and errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from polar_cli.errors import RequestError
from polar_cli.translate import ir
from polar_cli.translate.codec import Route
from polar_cli.translate.openai_responses import (
    CODEC,
    custom_tool_description,
    decode_request,
    drop_hosted_tools,
)
from polar_cli.translate.openai_responses_encode import encode_response

DATA = Path(__file__).parents[2] / "data" / "harness_requests"
ROUTE = Route(api="openai_responses")


def recorded(harness: str, run: str | None = None) -> list[dict[str, Any]]:
    lines = (json.loads(line) for line in (DATA / f"{harness}.jsonl").read_text().splitlines() if line.strip())
    return [d for d in lines if d.get("api") == "responses" and (run is None or d["run"] == run)]


def decode(body: dict[str, Any]) -> ir.ChatRequest:
    return decode_request(body, ROUTE)


def test_codec_identity() -> None:
    assert CODEC.name == "openai_responses"
    assert CODEC.tool_call_id_prefix == "call_"
    assert CODEC.decode_request is decode_request


@pytest.mark.parametrize("record", recorded("codex") + recorded("pi"), ids=lambda d: f"{d['run']}-{d['seq']}")
def test_every_recorded_request_decodes(record: dict[str, Any]) -> None:
    request = decode(record["body"])
    assert request.model == record["body"]["model"]
    assert request.stream is True
    assert request.messages[-1].role in ("user", "tool")


def test_recorded_requests_exist() -> None:
    assert len(recorded("codex")) == 7
    assert len(recorded("pi")) == 2


def test_codex_tool_round_trip() -> None:
    first, second = recorded("codex", "codex_tool")
    req = decode(second["body"])
    assert [m.role for m in req.messages] == ["system", "system", "user", "user", "assistant", "tool"]
    assert req.messages[0].text.startswith("You are Codex")  # developer -> system
    assert req.messages[3].text == "create hello.txt containing hi"
    call = req.messages[4].tool_calls[0]
    assert call == ir.ToolCall(
        id="call_afc0ce2d13804224", name="exec_command", arguments='{"cmd": "echo hi > hello.txt"}'
    )
    tool = req.messages[5]
    assert tool.tool_call_id == "call_afc0ce2d13804224"
    assert tool.name == "exec_command"
    assert tool.text.startswith("Chunk ID: 52edb7\nWall time:")
    assert decode(first["body"]).messages == req.messages[:4]


def test_codex_settings_and_tools() -> None:
    req = decode(recorded("codex", "codex_text")[0]["body"])
    assert req.tool_choice == ir.ToolChoice(mode="auto")
    assert req.parallel_tool_calls is True
    assert req.reasoning == ir.Reasoning(enabled=True, effort="medium")
    assert req.sampling == ir.Sampling()
    assert req.response_format is None  # text.verbosity alone is no format
    # web_search and tool_search are hosted tools: dropped. apply_patch is the freeform tool.
    assert [t.name for t in req.tools] == [
        "exec_command",
        "write_stdin",
        "request_user_input",
        "apply_patch",
        "view_image",
        "get_goal",
        "create_goal",
        "update_goal",
    ]
    patch = req.tool("apply_patch")
    assert patch is not None and patch.kind == "custom"
    assert patch.parameters == ir.custom_tool_parameters()
    assert patch.description.startswith("The `apply_patch` tool can be used to edit files.")
    assert "```lark\nstart: begin_patch hunk+ end_patch\n" in patch.description
    exec_command = req.tool("exec_command")
    assert exec_command is not None and exec_command.parameters["required"] == ["cmd"]


def test_pi_tool_round_trip() -> None:
    first, second = recorded("pi", "pi_tool_resp")
    req = decode(second["body"])
    assert [m.role for m in req.messages] == ["system", "user", "assistant", "tool"]
    assert req.messages[0].text.startswith("You are an expert coding assistant operating inside pi")
    assert req.messages[2].tool_calls == (
        ir.ToolCall(id="call_70721ad6e98243db", name="bash", arguments='{"command":"echo hi > hello.txt"}'),
    )
    assert req.messages[3] == ir.Message(
        role="tool", content=(ir.Text("(no output)"),), tool_call_id="call_70721ad6e98243db", name="bash"
    )
    assert req.sampling.max_tokens == 16384
    assert req.tool_choice is None
    assert [t.name for t in decode(first["body"]).tools] == ["read", "bash", "edit", "write"]


# --- item folding ----------------------------------------------------------------------------------------------


def test_instructions_and_string_input() -> None:
    req = decode({"model": "m", "instructions": "be brief", "input": "hi"})
    assert req.messages == (
        ir.Message(role="system", content=(ir.Text("be brief"),)),
        ir.Message(role="user", content=(ir.Text("hi"),)),
    )
    assert req.stream is False


def summary(*texts: str) -> dict[str, Any]:
    return {"type": "reasoning", "summary": [{"type": "summary_text", "text": t} for t in texts]}


def fc(call_id: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def text(kind: str, value: str) -> dict[str, Any]:
    return {"type": kind, "text": value}


def test_assistant_items_merge_into_one_turn_with_reasoning() -> None:
    items = [
        {"role": "user", "content": "go"},
        {**summary("a", "b"), "encrypted_content": "opaque"},
        {"type": "message", "role": "assistant", "content": [text("output_text", "doing it")]},
        fc("call_1", "sh"),
        {"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "function_call_output", "call_id": "call_1", "output": "ok"},
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": [text("input_text", "Done!")]},
    ]
    _, assistant, out1, out2 = decode({"model": "m", "input": items}).messages
    assert assistant.role == "assistant"
    assert assistant.text == "doing it"
    assert assistant.reasoning == "a\n\nb"
    assert assistant.tool_calls == (
        ir.ToolCall("call_1", "sh", "{}"),
        ir.ToolCall("call_2", "apply_patch", '{"input":"*** Begin Patch"}', kind="custom"),
    )
    assert ir.custom_input(assistant.tool_calls[1]) == "*** Begin Patch"
    assert (out1.tool_call_id, out1.name, out1.text) == ("call_1", "sh", "ok")
    assert (out2.tool_call_id, out2.name, out2.text) == ("call_2", "apply_patch", "Done!")


def test_reasoning_after_output_starts_next_turn_and_content_wins_over_summary() -> None:
    items = [
        {**summary("short"), "content": [text("reasoning_text", "full")]},
        fc("c1", "a"),
        summary(),
        summary("second"),
        fc("c2", "b"),
    ]
    turns = decode({"model": "m", "input": items}).messages
    assert [(m.reasoning, [c.id for c in m.tool_calls]) for m in turns] == [("full", ["c1"]), ("second", ["c2"])]


def test_dangling_reasoning_is_dropped() -> None:
    req = decode({"model": "m", "input": [summary("x"), {"role": "user", "content": "hi"}]})
    assert req.messages == (ir.Message(role="user", content=(ir.Text("hi"),)),)


def test_content_parts() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64,AA==", "detail": "auto"}
    items = [
        {"role": "user", "content": [text("input_text", "see"), image]},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
        {"role": "system", "content": "sys"},
    ]
    req = decode({"model": "m", "input": items})
    assert req.messages[0].content == (ir.Text("see"), ir.Image("data:image/png;base64,AA=="))
    assert req.messages[1] == ir.Message(role="assistant", content=(ir.Text("no"),))
    assert req.messages[2] == ir.Message(role="system", content=(ir.Text("sys"),))


def test_encoded_output_decodes_back_to_the_same_turn() -> None:
    calls = (
        ir.ToolCall("call_9", "sh", '{"cmd":"ls"}'),
        ir.ToolCall("call_8", "apply_patch", '{"input": "P"}', "custom"),
    )
    completion = ir.Completion("x1", "m", 1, "text", "why", calls, "tool_calls", ir.Usage(1, 2))
    output = encode_response(decode({"model": "m", "input": "hi"}), completion)["output"]
    (turn,) = decode({"model": "m", "input": output}).messages
    assert (turn.text, turn.reasoning) == ("text", "why")
    assert [(c.id, c.name, c.kind) for c in turn.tool_calls] == [
        ("call_9", "sh", "function"),
        ("call_8", "apply_patch", "custom"),
    ]
    assert ir.custom_input(turn.tool_calls[1]) == "P"


# --- settings --------------------------------------------------------------------------------------------------


def test_settings() -> None:
    json_schema = {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True}
    req = decode(
        {
            "model": "m",
            "input": "hi",
            "max_output_tokens": 100,
            "temperature": 0.5,
            "top_p": 1,
            "reasoning": {"effort": "high", "summary": "auto"},
            "text": {"format": json_schema, "verbosity": "low"},
            "tool_choice": {"type": "function", "name": "sh"},
            "parallel_tool_calls": False,
            "store": False,
            "include": ["reasoning.encrypted_content"],
            "prompt_cache_key": "k",
            "client_metadata": {"a": "b"},
        }
    )
    assert req.sampling == ir.Sampling(max_tokens=100, temperature=0.5, top_p=1.0)
    assert req.reasoning == ir.Reasoning(enabled=True, effort="high")
    assert req.response_format == ir.ResponseFormat(type="json_schema", schema={"type": "object"}, name="out")
    assert req.tool_choice == ir.ToolChoice(mode="tool", name="sh")
    assert req.parallel_tool_calls is False


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("reasoning", {"effort": "none"}, ir.Reasoning(enabled=False)),
        ("reasoning", {"summary": "auto"}, None),
        ("text", {"format": {"type": "json_object"}}, ir.ResponseFormat(type="json_object")),
        ("text", {"format": {"type": "text"}}, None),
        ("tool_choice", "required", ir.ToolChoice(mode="required")),
        ("tool_choice", {"type": "custom", "name": "apply_patch"}, ir.ToolChoice(mode="tool", name="apply_patch")),
    ],
)
def test_setting_variants(field: str, value: Any, expected: Any) -> None:
    req = decode({"model": "m", "input": "hi", field: value})
    actual = {"reasoning": req.reasoning, "text": req.response_format, "tool_choice": req.tool_choice}[field]
    assert actual == expected


def test_max_tokens_aliases_and_route_overrides() -> None:
    assert decode({"model": "m", "input": "x", "max_tokens": 7}).sampling.max_tokens == 7
    req = decode_request({"input": "x", "stream": False}, Route(api="openai_responses", model="routed", stream=True))
    assert (req.model, req.stream) == ("routed", True)


# --- quirks ----------------------------------------------------------------------------------------------------


def test_drop_hosted_tools_keeps_indices() -> None:
    tools = [
        {"type": "web_search"},
        {"type": "function", "name": "a"},
        {"type": "web_search_preview_2025_03_11"},
        "junk",
    ]
    assert drop_hosted_tools(tools) == [(1, {"type": "function", "name": "a"}), (3, "junk")]


def test_custom_tool_description() -> None:
    assert custom_tool_description("d", None, "f") == "d"
    assert custom_tool_description("d", {"type": "text"}, "f") == "d"
    grammar = custom_tool_description("d", {"type": "grammar", "syntax": "regex", "definition": "a+\n"}, "f")
    assert grammar == (
        "d\n\nPass this tool's raw text as the string argument `input`; that text must match this regex grammar:\n"
        "```regex\na+\n```"
    )


# --- errors ----------------------------------------------------------------------------------------------------


def body(**fields: Any) -> dict[str, Any]:
    return {"model": "m", "input": "x", **fields}


def one_item(**item: Any) -> dict[str, Any]:
    return body(input=[item])


def one_tool(**tool: Any) -> dict[str, Any]:
    return body(tools=[tool])


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        ([], "body: expected a JSON object, got array"),
        ({"input": "x"}, "model: required"),
        (body(model=3), "model: expected a string, got number"),
        ({"model": "m"}, "input: required"),
        (body(input={"a": 1}), "input: expected an array, got object"),
        (body(input=[1]), "input[0]: expected an object, got number"),
        (one_item(content="x"), "input[0].type: required"),
        (one_item(type="web_search_call"), "input[0].type: unsupported input item type 'web_search_call'"),
        (one_item(role="tool", content="x"), "input[0].role: unsupported role 'tool'"),
        (
            one_item(role="user", content=[{"type": "input_audio"}]),
            "input[0].content[0].type: unsupported content part type 'input_audio'",
        ),
        (
            one_item(role="user", content=[{"type": "input_image", "file_id": "f"}]),
            "input[0].content[0].image_url: required (file_id images are not supported)",
        ),
        (one_item(role="user", content=None), "input[0].content: expected a string or an array, got null"),
        (
            one_item(type="function_call", call_id="c", name="n", arguments={}),
            "input[0].arguments: expected a string, got object",
        ),
        (
            one_item(type="function_call_output", call_id="c", output=5),
            "input[0].output: expected a string or an array, got number",
        ),
        (one_item(type="reasoning", summary="x"), "input[0].summary: expected an array, got string"),
        (one_tool(type="function"), "tools[0].name: required"),
        (
            body(tools=[{"type": "web_search"}, {"type": "teleport", "name": "n"}]),
            "tools[1].type: unsupported tool type 'teleport'",
        ),
        (one_tool(type="function", name="f", parameters=[]), "tools[0].parameters: expected an object, got array"),
        (
            one_tool(type="custom", name="c", format={"type": "xml"}),
            "tools[0].format.type: unsupported custom tool format 'xml'",
        ),
        (body(tool_choice="any"), "tool_choice: unsupported value 'any'"),
        (body(tool_choice={"type": "allowed_tools"}), "tool_choice.type: unsupported tool choice 'allowed_tools'"),
        (body(max_output_tokens=True), "max_output_tokens: expected an integer, got boolean"),
        (body(temperature="hot"), "temperature: expected a number, got string"),
        (body(top_p=10**400), "top_p: number out of range"),
        (body(stream="yes"), "stream: expected a boolean, got string"),
        (body(reasoning={"effort": 1}), "reasoning.effort: expected a string, got number"),
        (body(text={"format": {"type": "grammar"}}), "text.format.type: unsupported format 'grammar'"),
        (body(text={"format": {"type": "json_schema"}}), "text.format.schema: required"),
    ],
)
def test_malformed_requests(request_body: Any, message: str) -> None:
    with pytest.raises(RequestError) as info:
        decode(request_body)
    assert info.value.message == message
    assert info.value.status == 400


@pytest.mark.parametrize(
    ("body", "start"),
    [
        ({"model": "m", "input": "x", "previous_response_id": "resp_1"}, "previous_response_id: not supported"),
        ({"model": "m", "input": "x", "conversation": "conv_1"}, "conversation: not supported"),
        ({"model": "m", "input": "x", "background": True}, "background: not supported"),
        (
            {"model": "m", "input": [{"type": "item_reference", "id": "rs_1"}]},
            "input[0]: item_reference is not supported",
        ),
    ],
)
def test_stateful_requests_are_refused(body: dict[str, Any], start: str) -> None:
    with pytest.raises(RequestError) as info:
        decode(body)
    assert info.value.message.startswith(start)
    assert info.value.status == 400


def test_unencodable_custom_input_is_a_request_error() -> None:
    body = {"model": "m", "input": [{"type": "custom_tool_call", "call_id": "c", "name": "n", "input": "\ud800"}]}
    with pytest.raises(RequestError, match=r"input\[0\]\.input"):
        decode(body)
