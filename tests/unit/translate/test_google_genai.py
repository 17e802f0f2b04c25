"""Decoding Gemini generateContent requests: recorded harness traffic, quirks, every config field, malformed bodies.

The fuzzing (random and mutated bodies) is the codec contract's, shared with the other codecs: test_codec_contract.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from polar_cli.errors import RequestError
from polar_cli.translate.codec import Route
from polar_cli.translate.google_genai import (
    decode_request,
    quirk_function_role,
    quirk_merge_model_contents,
    quirk_signature_only_part,
)
from polar_cli.translate.google_genai_config import quirk_drop_builtin_tool, quirk_uppercase_schema_types
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

DATA = Path(__file__).resolve().parents[2] / "data" / "harness_requests"
PATH_RE = re.compile(r"^/v1(?:beta)?/models/(?P<model>[^:/]+):(?P<method>streamGenerateContent|generateContent)$")
STREAM = Route(api="google_genai", model="gemini-lab", stream=True)


def _records() -> list[dict[str, Any]]:
    out = []
    for file in sorted(DATA.glob("*.jsonl")):
        for line in file.read_text().splitlines():
            record = json.loads(line)
            if record.get("api") is not None and PATH_RE.match(record.get("path", "")):
                out.append(record)
    return out


RECORDS = _records()


def route_of(record: dict[str, Any]) -> Route:
    match = PATH_RE.match(record["path"])
    assert match is not None
    return Route(api="google_genai", model=match["model"], stream=match["method"] == "streamGenerateContent")


def recorded(run: str, seq: int) -> tuple[dict[str, Any], Route]:
    record = next(r for r in RECORDS if r["run"] == run and r["seq"] == seq)
    return record["body"], route_of(record)


def decode(body: dict[str, Any], route: Route = STREAM) -> ChatRequest:
    return decode_request(body, route)


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts)}


def model_turn(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "model", "parts": list(parts)}


def call(name: str, args: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    fc: dict[str, Any] = {"name": name, "args": args}
    if id is not None:
        fc["id"] = id
    return {"functionCall": fc}


def result(name: str, response: dict[str, Any], id: str | None = None) -> dict[str, Any]:
    fr: dict[str, Any] = {"name": name, "response": response}
    if id is not None:
        fr["id"] = id
    return {"functionResponse": fr}


# --- recorded traffic -----------------------------------------------------------------------------------------------


def test_recorded_traffic_covers_both_harnesses_and_both_methods() -> None:
    assert {r["harness"] for r in RECORDS} == {"gemini-cli", "pi"}
    assert {route_of(r).stream for r in RECORDS} == {True, False}


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: f"{r['harness']}-{r['run']}-{r['seq']}")
def test_every_recorded_request_decodes(record: dict[str, Any]) -> None:
    route = route_of(record)
    request = decode(record["body"], route)
    assert request.model == route.model
    assert request.stream is route.stream
    assert request.messages[0].role == "system"
    assert request.messages[-1].role in ("user", "tool")
    called = {c.id for m in request.messages for c in m.tool_calls}
    assert all(m.tool_call_id in called for m in request.messages if m.role == "tool")


def test_gemini_cli_tool_round_trip() -> None:
    request = decode(*recorded("gemini_tool", 5))
    system, first, assistant, tool = request.messages
    assert system.role == "system" and system.text.startswith("You are Gemini CLI")
    assert first.role == "user" and len(first.content) == 2
    assert first.content[1] == Text("create hello.txt containing hi")
    assert assistant == Message(
        role="assistant",
        tool_calls=(
            ToolCall(
                id="run_shell_command_1795994950604_0",
                name="run_shell_command",
                arguments='{"command":"echo hi > hello.txt","description":"Create hello.txt"}',
            ),
        ),
    )
    assert tool.role == "tool" and tool.tool_call_id == "run_shell_command_1795994950604_0"
    assert tool.name == "run_shell_command" and not tool.is_error
    assert tool.text.startswith("<untrusted_context>\nOutput: (empty)")
    assert request.sampling == Sampling(temperature=1.0, top_p=0.95, top_k=64)
    assert request.reasoning == Reasoning(enabled=True, effort="high")
    assert request.model == "gemini-3.8-flash" and request.stream
    shell = request.tool("run_shell_command")
    assert shell is not None and shell.parameters["type"] == "object" and "command" in shell.parameters["properties"]
    assert len(request.tools) == 15 and request.response_format is None


def test_gemini_cli_router_call_is_json_mode_with_lowercased_schema() -> None:
    request = decode(*recorded("gemini_text", 3))
    assert not request.stream and request.model == "gemini-3.5-flash-lite"
    assert [m.role for m in request.messages] == ["system", "user", "user"]
    assert request.tools == ()
    assert request.response_format == ResponseFormat(
        type="json_schema",
        schema={
            "type": "object",
            "properties": {
                "complexity_reasoning": {"type": "string", "description": "Brief explanation for the score."},
                "complexity_score": {"type": "integer", "description": "Complexity score from 1-100."},
            },
            "required": ["complexity_reasoning", "complexity_score"],
        },
    )


def test_gemini_cli_thinking_budget() -> None:
    request = decode(*recorded("gemini_err429", 5))
    assert request.reasoning == Reasoning(enabled=True, budget_tokens=8192)


def test_pi_tool_round_trip_without_ids() -> None:
    request = decode(*recorded("pi_tool_gem", 2))
    system, first, assistant, tool = request.messages
    assert system.text.startswith("You are an expert coding assistant operating inside pi")
    assert first == Message(role="user", content=(Text("create hello.txt containing hi"),))
    assert assistant.tool_calls == (
        ToolCall(id="call_1_0", name="bash", arguments='{"command":"echo hi > hello.txt"}'),
    )
    assert tool == Message(
        role="tool", content=(Text("(no output)"),), tool_call_id="call_1_0", name="bash", is_error=False
    )
    assert request.sampling == Sampling(max_tokens=16384)
    assert request.reasoning is None
    assert [t.name for t in request.tools] == ["read", "bash", "edit", "write"]


# --- quirks ---------------------------------------------------------------------------------------------------------


def test_quirk_link_response_by_name_answers_earliest_unanswered_call() -> None:
    body = {
        "contents": [
            user({"text": "go"}),
            model_turn(call("bash", {"command": "a"}), call("read", {"path": "x"}), call("bash", {"command": "b"})),
            user(result("bash", {"output": "A"}), result("bash", {"output": "B"}), result("read", {"output": "X"})),
        ]
    }
    tools = [m for m in decode(body).messages if m.role == "tool"]
    assert [(m.tool_call_id, m.text) for m in tools] == [("call_1_0", "A"), ("call_1_2", "B"), ("call_1_1", "X")]


def test_quirk_link_response_by_name_falls_back_when_the_id_matches_no_call() -> None:
    body = {"contents": [user({"text": "go"}), model_turn(call("bash", {})), user(result("bash", {}, id="stale"))]}
    assert decode(body).messages[-1].tool_call_id == "call_1_0"


def test_response_ids_take_precedence_over_names() -> None:
    body = {
        "contents": [
            user({"text": "go"}),
            model_turn(call("bash", {"n": 1}, id="b1"), call("bash", {"n": 2}, id="b2")),
            user(result("bash", {"output": "two"}, id="b2"), result("bash", {"output": "one"})),
        ]
    }
    tools = [m for m in decode(body).messages if m.role == "tool"]
    assert [(m.tool_call_id, m.text) for m in tools] == [("b2", "two"), ("b1", "one")]


def test_orphan_function_response_is_refused() -> None:
    body = {"contents": [user({"text": "go"}), model_turn(call("bash", {})), user(result("read", {}))]}
    with pytest.raises(RequestError, match=r"contents\[2\]\.parts\[0\]\.functionResponse: no earlier functionCall"):
        decode(body)


def test_quirk_function_role() -> None:
    assert quirk_function_role("function") == "user" and quirk_function_role("model") == "model"
    body = {
        "contents": [user({"text": "go"}), model_turn(call("f", {})), {"role": "function", "parts": [result("f", {})]}]
    }
    assert decode(body).messages[-1] == Message(role="tool", content=(Text("{}"),), tool_call_id="call_1_0", name="f")


def test_quirk_signature_only_part_is_skipped() -> None:
    assert quirk_signature_only_part({"thoughtSignature": "c2ln"})
    assert not quirk_signature_only_part({})
    body = {"contents": [user({"text": "hi"}), model_turn({"text": "ok"}, {"thoughtSignature": "c2ln"})]}
    assert decode(body).messages[-1] == Message(role="assistant", content=(Text("ok"),))
    with pytest.raises(RequestError, match=r"contents\[0\]\.parts\[0\]: no data field"):
        decode({"contents": [user({})]})


def test_quirk_merge_model_contents() -> None:
    first = Message(role="assistant", reasoning="hm")
    second = Message(role="assistant", content=(Text("ok"),), tool_calls=(ToolCall("c", "f", "{}"),))
    assert quirk_merge_model_contents(first, second) == Message(
        role="assistant", content=(Text("ok"),), reasoning="hm", tool_calls=(ToolCall("c", "f", "{}"),)
    )
    body = {
        "contents": [
            user({"text": "hi"}),
            model_turn({"text": "hm", "thought": True}),
            model_turn({"text": "ok"}),
            model_turn(call("f", {})),
            user(result("f", {"output": "done"})),
        ]
    }
    assert [m.role for m in decode(body).messages] == ["user", "assistant", "tool"]
    assert decode(body).messages[1].tool_calls == (ToolCall("call_3_0", "f", "{}"),)
    # A user content that decodes to nothing still separates two model turns.
    split = {
        "contents": [user({"text": "hi"}), model_turn({"text": "a"}), user({"text": ""}), model_turn({"text": "b"})]
    }
    assert [m.text for m in decode(split).messages] == ["hi", "a", "b"]


def test_quirk_drop_builtin_tool() -> None:
    assert quirk_drop_builtin_tool("googleSearch") and not quirk_drop_builtin_tool("functionDeclarations")
    body = {
        "contents": [user({"text": "hi"})],
        "tools": [
            {"googleSearch": {}},
            {"code_execution": {}, "url_context": {}},
            {"functionDeclarations": [{"name": "f"}]},
        ],
    }
    request = decode(body)
    assert [t.name for t in request.tools] == ["f"]
    assert request.tools[0].parameters == {"type": "object", "properties": {}}
    with pytest.raises(RequestError, match=r"^tools\[0\]\.mysteryTool: unsupported tool type 'mysteryTool'$"):
        decode({"contents": [user({"text": "hi"})], "tools": [{"mysteryTool": {}}]})


def test_quirk_uppercase_schema_types_walks_only_schema_positions() -> None:
    schema = {
        "type": "OBJECT",
        "properties": {
            "type": {"type": "STRING", "enum": ["OBJECT"]},
            "list": {"type": "ARRAY", "items": {"type": "INTEGER"}},
            "either": {"anyOf": [{"type": "NULL"}, {"type": "BOOLEAN"}]},
        },
        "additionalProperties": False,
    }
    assert quirk_uppercase_schema_types(schema, "p") == {
        "type": "object",
        "properties": {
            "type": {"type": "string", "enum": ["OBJECT"]},
            "list": {"type": "array", "items": {"type": "integer"}},
            "either": {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
        },
        "additionalProperties": False,
    }


def test_invalid_arguments_wrapper_is_unwrapped_to_the_sampled_text() -> None:
    body = {"contents": [user({"text": "go"}), model_turn(call("bash", {"_raw_arguments": '{"command": "ls'}))]}
    assert decode(body).messages[-1].tool_calls[0].arguments == '{"command": "ls'


# --- contents -------------------------------------------------------------------------------------------------------


def test_python_sdk_spelling_snake_case_everywhere() -> None:
    body = {
        "contents": [user({"text": "hi"}, {"inline_data": {"mime_type": "image/png", "data": "iVBORw=="}})],
        "system_instruction": {"parts": [{"text": "sys"}]},
        "tools": [{"function_declarations": [{"name": "g", "parameters_json_schema": {"type": "object"}}]}],
        "tool_config": {"function_calling_config": {"mode": "ANY", "allowed_function_names": ["g"]}},
        "generation_config": {
            "max_output_tokens": 9,
            "top_k": 3.0,
            "stop_sequences": ["END"],
            "response_mime_type": "application/json",
            "thinking_config": {"include_thoughts": True, "thinking_budget": 100},
        },
    }
    request = decode(body)
    assert request.messages == (
        Message(role="system", content=(Text("sys"),)),
        Message(role="user", content=(Text("hi"), Image("data:image/png;base64,iVBORw=="))),
    )
    assert request.tools[0].name == "g" and request.tools[0].parameters == {"type": "object"}
    assert request.tool_choice == ToolChoice(mode="tool", name="g")
    assert request.sampling == Sampling(max_tokens=9, top_k=3, stop=("END",))
    assert request.reasoning == Reasoning(enabled=True, budget_tokens=100)
    assert request.response_format == ResponseFormat(type="json_object")


def test_several_function_responses_become_tool_messages_before_the_rest_of_the_turn() -> None:
    body = {
        "contents": [
            user({"text": "look"}),
            model_turn(
                {"text": "thinking...", "thought": True}, {"text": "Let me check."}, call("a", {}), call("b", {})
            ),
            user(
                {"text": "Tool result image:"},
                result("a", {"output": "fine"}),
                {"fileData": {"fileUri": "https://x.test/cat.png", "mimeType": "image/png"}},
                result("b", {"error": "boom"}),
            ),
        ]
    }
    messages = decode(body).messages
    assert messages[1] == Message(
        role="assistant",
        content=(Text("Let me check."),),
        reasoning="thinking...",
        tool_calls=(ToolCall("call_1_2", "a", "{}"), ToolCall("call_1_3", "b", "{}")),
    )
    assert messages[2:] == (
        Message(role="tool", content=(Text("fine"),), tool_call_id="call_1_2", name="a"),
        Message(role="tool", content=(Text("boom"),), tool_call_id="call_1_3", name="b", is_error=True),
        Message(role="user", content=(Text("Tool result image:"), Image("https://x.test/cat.png"))),
    )


def test_tool_result_content_is_the_json_text_of_anything_but_a_lone_output_string() -> None:
    body = {
        "contents": [
            user({"text": "go"}),
            model_turn(call("f", {})),
            user(
                result(
                    "f",
                    {"result": "ok", "isError": False},
                    id="call_1_0",
                )
            ),
        ]
    }
    assert decode(body).messages[-1].text == '{"result":"ok","isError":false}'


def test_multimodal_function_response_parts_become_images_of_the_tool_message() -> None:
    response = {
        "name": "read",
        "response": {"output": "(see attached image)"},
        "parts": [{"inlineData": {"mimeType": "image/jpeg", "data": "AAAA"}}],
    }
    body = {"contents": [user({"text": "go"}), model_turn(call("read", {})), user({"functionResponse": response})]}
    assert decode(body).messages[-1].content == (Text("(see attached image)"), Image("data:image/jpeg;base64,AAAA"))


def test_system_instruction_as_plain_string_and_thoughts_joined() -> None:
    body = {
        "systemInstruction": "Be brief.",
        "contents": [
            user({"text": "hi"}),
            model_turn({"text": "a", "thought": True}, {"text": "b", "thought": True}, {"text": ""}, {"text": "yo"}),
        ],
    }
    messages = decode(body).messages
    assert messages[0] == Message(role="system", content=(Text("Be brief."),))
    assert messages[2] == Message(role="assistant", content=(Text("yo"),), reasoning="ab")


# --- tools and config -----------------------------------------------------------------------------------------------


def test_openapi_parameters_are_converted_to_json_schema() -> None:
    parameters = {
        "type": "OBJECT",
        "properties": {
            "path": {"type": "STRING", "nullable": True, "min_length": 1, "example": "a.txt"},
            "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "maxItems": 3},
            "mode": {"any_of": [{"type": "INTEGER"}, {"type": "BOOLEAN"}]},
        },
        "property_ordering": ["path", "tags", "mode"],
        "required": ["path"],
    }
    body = {
        "contents": [user({"text": "x"})],
        "tools": [{"functionDeclarations": [{"name": "f", "parameters": parameters}]}],
    }
    assert decode(body).tools[0].parameters == {
        "type": "object",
        "properties": {
            "path": {"type": ["string", "null"], "minLength": 1, "examples": ["a.txt"]},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "mode": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
        },
        "required": ["path"],
    }


@pytest.mark.parametrize(
    ("config", "choice"),
    [
        ({"mode": "AUTO"}, ToolChoice(mode="auto")),
        ({"mode": "VALIDATED"}, ToolChoice(mode="auto")),
        ({"mode": "NONE"}, ToolChoice(mode="none")),
        ({"mode": "ANY"}, ToolChoice(mode="required")),
        ({"mode": "ANY", "allowedFunctionNames": ["a", "b"]}, ToolChoice(mode="required")),
        ({"mode": "ANY", "allowedFunctionNames": ["b"]}, ToolChoice(mode="tool", name="b")),
        ({}, None),
    ],
)
def test_function_calling_modes(config: dict[str, Any], choice: ToolChoice | None) -> None:
    body = {"contents": [user({"text": "x"})], "toolConfig": {"functionCallingConfig": config}}
    assert decode(body).tool_choice == choice


def test_every_generation_parameter_is_mapped() -> None:
    config = {
        "temperature": 0.2,
        "topP": 0.9,
        "topK": 40,
        "maxOutputTokens": 512,
        "stopSequences": ["\n\n", "END"],
        "seed": 7,
        "presencePenalty": 0.5,
        "frequencyPenalty": -0.5,
        "candidateCount": 1,
        "responseModalities": ["TEXT"],
        "responseLogprobs": False,
    }
    request = decode({"contents": [user({"text": "x"})], "generationConfig": config})
    assert request.sampling == Sampling(
        max_tokens=512,
        temperature=0.2,
        top_p=0.9,
        top_k=40,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        seed=7,
        stop=("\n\n", "END"),
    )


@pytest.mark.parametrize(
    ("thinking", "reasoning"),
    [
        ({"thinkingBudget": 0}, Reasoning(enabled=False)),
        ({"thinkingBudget": 0, "includeThoughts": True}, Reasoning(enabled=False)),
        ({"thinkingBudget": -1}, Reasoning(enabled=True)),
        ({"thinkingBudget": 2048}, Reasoning(enabled=True, budget_tokens=2048)),
        ({"thinkingLevel": "LOW"}, Reasoning(enabled=True, effort="low")),
        ({"thinkingLevel": "minimal"}, Reasoning(enabled=True, effort="minimal")),
        ({"includeThoughts": True}, Reasoning(enabled=True)),
        ({"includeThoughts": False}, None),
    ],
)
def test_thinking_config(thinking: dict[str, Any], reasoning: Reasoning | None) -> None:
    body = {"contents": [user({"text": "x"})], "generationConfig": {"thinkingConfig": thinking}}
    assert decode(body).reasoning == reasoning


@pytest.mark.parametrize(
    ("config", "response_format"),
    [
        ({"responseMimeType": "application/json"}, ResponseFormat(type="json_object")),
        ({"responseMimeType": "text/plain"}, None),
        (
            {"responseMimeType": "application/json", "responseSchema": {"type": "ARRAY", "items": {"type": "NUMBER"}}},
            ResponseFormat(type="json_schema", schema={"type": "array", "items": {"type": "number"}}),
        ),
        (
            {"response_mime_type": "application/json", "response_json_schema": {"type": "object", "required": ["a"]}},
            ResponseFormat(type="json_schema", schema={"type": "object", "required": ["a"]}),
        ),
    ],
)
def test_json_mode(config: dict[str, Any], response_format: ResponseFormat | None) -> None:
    body = {"contents": [user({"text": "x"})], "generationConfig": config}
    assert decode(body).response_format == response_format


# --- malformed requests ---------------------------------------------------------------------------------------------

OK_CONTENTS = [user({"text": "x"})]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], r"^body: expected a JSON object, got array"),
        ({}, r"^contents: missing or empty"),
        ({"contents": "hi"}, r"^contents: expected an array, got string"),
        ({"contents": [5]}, r"^contents\[0\]: expected an object, got number"),
        ({"contents": [{"role": "system", "parts": []}]}, r"^contents\[0\]\.role: expected 'user' or 'model'"),
        ({"contents": [{"role": 1}]}, r"^contents\[0\]\.role: expected a string, got number"),
        ({"contents": [{"parts": {"text": "x"}}]}, r"^contents\[0\]\.parts: expected an array, got object"),
        ({"contents": [user({"text": 3})]}, r"^contents\[0\]\.parts\[0\]\.text: expected a string, got number"),
        ({"contents": [user({"videoMetadata": {}})]}, r"^contents\[0\]\.parts\[0\]: no data field"),
        ({"contents": [user({"text": "a", "functionCall": {}})]}, r"one datum, got text, functionCall"),
        ({"contents": [user({"executableCode": {"code": "1"}})]}, r"unsupported part 'executableCode' in a user turn"),
        ({"contents": [user(call("f", {}))]}, r"unsupported part 'functionCall' in a user turn"),
        ({"contents": [model_turn({"inlineData": {}})]}, r"unsupported part 'inlineData' in a model turn"),
        ({"contents": [model_turn({"functionCall": {"args": {}}})]}, r"parts\[0\]\.functionCall\.name: required"),
        ({"contents": [model_turn(call("f", [1]))]}, r"functionCall\.args: expected an object, got array"),  # type: ignore[arg-type]
        (
            {"contents": [user({"inlineData": {"mimeType": "application/pdf", "data": "JVBE"}})]},
            r"inlineData\.mimeType: unsupported media type 'application/pdf'",
        ),
        ({"contents": [user({"inlineData": {"mimeType": "image/png"}})]}, r"inlineData\.data: required"),
        ({"contents": [user({"text": "x"})], "cachedContent": "c/1"}, r"^cachedContent: cached contents"),
        (
            {"contents": OK_CONTENTS, "systemInstruction": {"parts": [{"fileData": {}}]}},
            r"systemInstruction\.parts\[0\]\.text: required",
        ),
        ({"contents": OK_CONTENTS, "tools": {}}, r"^tools: expected an array, got object"),
        (
            {"contents": OK_CONTENTS, "tools": [{"functionDeclarations": [{"name": "f", "parameters": "x"}]}]},
            r"tools\[0\]\.functionDeclarations\[0\]\.parameters: expected an object, got string",
        ),
        (
            {
                "contents": OK_CONTENTS,
                "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "BLOB"}}]}],
            },
            r"parameters\.type: unknown schema type 'BLOB'",
        ),
        (
            {"contents": OK_CONTENTS, "tools": [{"functionDeclarations": [{"description": "no name"}]}]},
            r"tools\[0\]\.functionDeclarations\[0\]\.name: required",
        ),
        (
            {"contents": OK_CONTENTS, "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}},
            r"toolConfig\.functionCallingConfig\.mode: unknown mode 'SOMETIMES'",
        ),
        (
            {"contents": OK_CONTENTS, "generationConfig": {"temperature": "hot"}},
            r"generationConfig\.temperature: expected a number",
        ),
        ({"contents": OK_CONTENTS, "generationConfig": {"topK": 2.5}}, r"generationConfig\.topK: expected an integer"),
        (
            {"contents": OK_CONTENTS, "generationConfig": {"candidateCount": 2}},
            r"generationConfig\.candidateCount: only one",
        ),
        (
            {"contents": OK_CONTENTS, "generationConfig": {"stopSequences": [1]}},
            r"generationConfig\.stopSequences\[0\]",
        ),
        (
            {"contents": OK_CONTENTS, "generationConfig": {"responseModalities": ["IMAGE"]}},
            r"unsupported modality 'IMAGE'",
        ),
        (
            {"contents": OK_CONTENTS, "generationConfig": {"responseMimeType": "text/x.enum"}},
            r"responseMimeType: unsupported",
        ),
        (
            {"contents": OK_CONTENTS, "generationConfig": {"thinkingConfig": {"thinkingLevel": "EXTREME"}}},
            r"generationConfig\.thinkingConfig\.thinkingLevel: unknown level 'EXTREME'",
        ),
        (
            {"contents": OK_CONTENTS, "generationConfig": {"thinkingConfig": {"includeThoughts": "yes"}}},
            r"thinkingConfig\.includeThoughts: expected a boolean, got string",
        ),
    ],
)
def test_malformed_requests_name_the_field(body: Any, message: str) -> None:
    with pytest.raises(RequestError, match=message) as info:
        decode(body)
    assert info.value.status == 400 and info.value.kind == "invalid_request"


def test_model_comes_from_the_route() -> None:
    with pytest.raises(RequestError, match=r"^model: missing"):
        decode({"contents": OK_CONTENTS}, Route(api="google_genai"))
    assert decode({"contents": OK_CONTENTS}, Route(api="google_genai", model="m", stream=None)).stream is False


def test_schema_depth_is_bounded() -> None:
    schema: dict[str, Any] = {"type": "STRING"}
    for _ in range(100):
        schema = {"type": "ARRAY", "items": schema}
    body = {"contents": OK_CONTENTS, "tools": [{"functionDeclarations": [{"name": "f", "parameters": schema}]}]}
    with pytest.raises(RequestError, match="nested deeper"):
        decode(body)
