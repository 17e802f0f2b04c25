"""The google-genai SDK, pointed at a fake gateway made of the Google codec, parses what we encode.

The fake gateway is an `httpx.MockTransport`: it decodes the SDK's real request with `decode_request`, asks a scripted
model for a `Completion`, and answers with `encode_response` or `encode_stream` (or `encode_error`). No network.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import pydantic
import pytest
from google import genai
from google.genai import errors, types

from polar_cli.errors import ErrorKind
from polar_cli.translate.codec import Route
from polar_cli.translate.google_genai import CODEC
from polar_cli.translate.google_genai_encode import gemini_context_message
from polar_cli.translate.ir import ChatRequest, Completion, FinishReason, ResponseFormat, ToolCall, Usage

PATH_RE = re.compile(r"/v1(?:beta)?/models/(?P<model>[^:/]+):(?P<method>streamGenerateContent|generateContent)$")
Model = Callable[[ChatRequest], Completion]
PLAIN_USAGE = Usage(prompt_tokens=12, completion_tokens=5)


def completion(
    text: str = "",
    reasoning: str | None = None,
    calls: tuple[ToolCall, ...] = (),
    finish: FinishReason = "stop",
    usage: Usage = PLAIN_USAGE,
) -> Completion:
    return Completion(
        id="resp_1",
        model="upstream-model",
        created=1_800_000_000,
        text=text,
        reasoning=reasoning,
        tool_calls=calls,
        finish_reason=finish,
        usage=usage,
    )


class Gateway:
    """Records every decoded request and answers with the scripted model, or with an error body."""

    def __init__(self, model: Model, error: tuple[int, ErrorKind, str] | None = None) -> None:
        self.model = model
        self.error = error
        self.requests: list[ChatRequest] = []
        self.streamed: list[bytes] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        match = PATH_RE.search(request.url.path)
        assert match is not None, request.url.path
        route = Route(api="google_genai", model=match["model"], stream=match["method"] == "streamGenerateContent")
        if self.error is not None:
            return httpx.Response(self.error[0], json=CODEC.encode_error(*self.error))
        chat = CODEC.decode_request(json.loads(request.content), route)
        self.requests.append(chat)
        answer = self.model(chat)
        if route.stream:
            assert request.url.params.get("alt") == "sse"
            self.streamed = CODEC.encode_stream(chat, answer)
            return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=b"".join(self.streamed))
        return httpx.Response(200, json=CODEC.encode_response(chat, answer))


def client(gateway: Gateway) -> genai.Client:
    transport = httpx.Client(transport=httpx.MockTransport(gateway))
    options = types.HttpOptions(base_url="http://polar.test", httpx_client=transport)
    return genai.Client(api_key="polar-session-key", http_options=options)


def answer(value: Completion) -> Model:
    return lambda _request: value


SHELL = types.FunctionDeclaration(
    name="run_shell_command",
    description="Run a shell command.",
    parameters_json_schema={"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
)
READ = types.FunctionDeclaration(
    name="read_file",
    parameters=types.Schema(
        type=types.Type.OBJECT, properties={"path": types.Schema(type=types.Type.STRING)}, required=["path"]
    ),
)
TOOLS = types.GenerateContentConfig(tools=[types.Tool(function_declarations=[SHELL, READ])])
TWO_CALLS = (
    ToolCall(id="call_a", name="run_shell_command", arguments='{"command": "ls -la"}'),
    ToolCall(id="call_b", name="read_file", arguments='{"path": "README.md"}'),
)
REASONING_USAGE = Usage(prompt_tokens=30, completion_tokens=20, reasoning_tokens=8, cached_tokens=4)


# --- non-streaming --------------------------------------------------------------------------------------------------


def test_plain_text() -> None:
    gateway = Gateway(answer(completion(text="Hello there.")))
    response = client(gateway).models.generate_content(model="gemini-lab", contents="hi")
    assert response.text == "Hello there."
    candidate = response.candidates[0]  # type: ignore[index]
    assert candidate.finish_reason == types.FinishReason.STOP and candidate.index == 0
    assert candidate.content.role == "model"  # type: ignore[union-attr]
    usage = response.usage_metadata
    assert usage is not None
    assert (usage.prompt_token_count, usage.candidates_token_count, usage.total_token_count) == (12, 5, 17)
    assert usage.thoughts_token_count is None
    assert response.model_version == "gemini-lab" and response.response_id == "resp_1"
    assert gateway.requests[0].model == "gemini-lab" and not gateway.requests[0].stream


def test_reasoning_and_text() -> None:
    value = completion(text="42", reasoning="Six times seven.", usage=REASONING_USAGE)
    response = client(Gateway(answer(value))).models.generate_content(model="m", contents="q")
    parts = response.candidates[0].content.parts  # type: ignore[index, union-attr]
    assert parts is not None
    assert [(p.text, p.thought) for p in parts] == [("Six times seven.", True), ("42", None)]
    assert response.text == "42"  # the SDK leaves thoughts out of .text
    usage = response.usage_metadata
    assert usage is not None
    assert (usage.candidates_token_count, usage.thoughts_token_count, usage.total_token_count) == (12, 8, 50)
    assert usage.cached_content_token_count == 4


def test_several_tool_calls() -> None:
    gateway = Gateway(answer(completion(text="Checking.", calls=TWO_CALLS, finish="tool_calls")))
    response = client(gateway).models.generate_content(model="m", contents="look around", config=TOOLS)
    calls = response.function_calls
    assert calls is not None
    assert [(c.id, c.name, c.args) for c in calls] == [
        ("call_a", "run_shell_command", {"command": "ls -la"}),
        ("call_b", "read_file", {"path": "README.md"}),
    ]
    assert response.candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]
    tools = {t.name: t for t in gateway.requests[0].tools}
    assert tools["read_file"].parameters == {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    }
    assert tools["run_shell_command"].parameters["required"] == ["command"]


def test_finish_by_length() -> None:
    value = completion(text="Once upon a", finish="length")
    response = client(Gateway(answer(value))).models.generate_content(model="m", contents="story")
    assert response.candidates[0].finish_reason == types.FinishReason.MAX_TOKENS  # type: ignore[index]
    assert response.text == "Once upon a"


def test_custom_tool_call_travels_as_its_input_wrapper() -> None:
    patch = ToolCall(id="call_p", name="apply_patch", arguments='{"input": "*** Begin Patch"}', kind="custom")
    response = client(Gateway(answer(completion(calls=(patch,))))).models.generate_content(model="m", contents="x")
    assert [(c.name, c.args) for c in response.function_calls or []] == [("apply_patch", {"input": "*** Begin Patch"})]


def test_invalid_arguments_are_wrapped_and_restored_on_the_next_turn() -> None:
    broken = ToolCall(id="call_x", name="run_shell_command", arguments='{"command": "ls')
    replies = iter([completion(calls=(broken,), finish="tool_calls"), completion(text="Sorry.")])
    gateway = Gateway(lambda _request: next(replies))
    chat = client(gateway).chats.create(model="m", config=TOOLS)
    first = chat.send_message("list files")
    assert [c.args for c in first.function_calls or []] == [{"_raw_arguments": '{"command": "ls'}]
    reply = types.Part.from_function_response(name="run_shell_command", response={"error": "bad arguments"})
    assert chat.send_message(reply).text == "Sorry."
    history = gateway.requests[1].messages
    assert history[-2].tool_calls == (broken,)
    assert history[-1].tool_call_id == "call_x" and history[-1].is_error and history[-1].text == "bad arguments"


def test_chat_function_round_trip_links_the_response_to_the_call() -> None:
    replies = iter([completion(calls=TWO_CALLS[:1], finish="tool_calls"), completion(text="Done.")])
    gateway = Gateway(lambda _request: next(replies))
    chat = client(gateway).chats.create(
        model="m", config=types.GenerateContentConfig(system_instruction="Be terse.", tools=TOOLS.tools)
    )
    chat.send_message("list files")
    output = types.Part.from_function_response(name="run_shell_command", response={"output": "a.txt"})
    assert chat.send_message(output).text == "Done."
    system, question, assistant, tool = gateway.requests[1].messages
    assert (system.text, question.text) == ("Be terse.", "list files")
    assert assistant.tool_calls == (ToolCall(id="call_a", name="run_shell_command", arguments='{"command":"ls -la"}'),)
    assert (tool.role, tool.tool_call_id, tool.name, tool.text) == ("tool", "call_a", "run_shell_command", "a.txt")


class Routing(pydantic.BaseModel):
    complexity_reasoning: str
    complexity_score: int


ROUTER_SCHEMA = {
    "type": "OBJECT",
    "properties": {"complexity_reasoning": {"type": "STRING"}, "complexity_score": {"type": "INTEGER"}},
    "required": ["complexity_reasoning", "complexity_score"],
}


def test_json_mode_with_response_json_schema_is_parsed() -> None:
    gateway = Gateway(answer(completion(text='{"complexity_reasoning": "trivial", "complexity_score": 3}')))
    config = types.GenerateContentConfig(response_mime_type="application/json", response_json_schema=ROUTER_SCHEMA)
    response = client(gateway).models.generate_content(model="router", contents="say done", config=config)
    assert response.parsed == {"complexity_reasoning": "trivial", "complexity_score": 3}
    response_format = gateway.requests[0].response_format
    assert response_format is not None and response_format.type == "json_schema"
    assert response_format.schema is not None and response_format.schema["type"] == "object"


def test_json_mode_with_a_pydantic_schema_and_without_schema() -> None:
    gateway = Gateway(answer(completion(text='{"complexity_reasoning": "hard", "complexity_score": 90}')))
    config = types.GenerateContentConfig(response_mime_type="application/json", response_schema=Routing)
    response = client(gateway).models.generate_content(model="m", contents="x", config=config)
    assert response.parsed == Routing(complexity_reasoning="hard", complexity_score=90)
    schema = gateway.requests[0].response_format.schema  # type: ignore[union-attr]
    assert schema is not None and schema["properties"]["complexity_score"]["type"] == "integer"
    plain = types.GenerateContentConfig(response_mime_type="application/json")
    client(gateway).models.generate_content(model="m", contents="x", config=plain)
    assert gateway.requests[1].response_format == ResponseFormat(type="json_object")


# --- streaming ------------------------------------------------------------------------------------------------------


def test_stream_frames_are_bare_data_lines() -> None:
    gateway = Gateway(answer(completion(text="hi", reasoning="hm", calls=TWO_CALLS)))
    list(client(gateway).models.generate_content_stream(model="m", contents="x", config=TOOLS))
    assert len(gateway.streamed) == 3
    for frame in gateway.streamed:
        assert frame.startswith(b"data: {") and frame.endswith(b"}\n\n") and b"event:" not in frame
    assert gateway.requests[0].stream


def test_stream_plain_text() -> None:
    chunks = list(
        client(Gateway(answer(completion(text="Hello there.")))).models.generate_content_stream(model="m", contents="x")
    )
    assert [c.text for c in chunks] == ["Hello there."]
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]
    assert chunks[-1].usage_metadata.total_token_count == 17  # type: ignore[union-attr]


def test_stream_reasoning_text_and_tool_calls() -> None:
    value = completion(text="Checking.", reasoning="Need a look.", calls=TWO_CALLS, usage=REASONING_USAGE)
    chunks = list(client(Gateway(answer(value))).models.generate_content_stream(model="m", contents="x", config=TOOLS))
    parts = [p for c in chunks for p in c.candidates[0].content.parts]  # type: ignore[index, union-attr]
    assert [(p.text, p.thought) for p in parts if p.text] == [("Need a look.", True), ("Checking.", None)]
    calls = [p.function_call for p in parts if p.function_call]
    assert [(c.id, c.name, c.args) for c in calls] == [
        ("call_a", "run_shell_command", {"command": "ls -la"}),
        ("call_b", "read_file", {"path": "README.md"}),
    ]
    finishes = [c.candidates[0].finish_reason for c in chunks]  # type: ignore[index]
    assert finishes == [None, None, types.FinishReason.STOP]
    assert [c.usage_metadata is not None for c in chunks] == [False, False, True]
    assert chunks[-1].usage_metadata.thoughts_token_count == 8  # type: ignore[union-attr]


def test_stream_finish_by_length_and_empty_answer() -> None:
    chunks = list(
        client(Gateway(answer(completion(finish="length")))).models.generate_content_stream(model="m", contents="x")
    )
    assert len(chunks) == 1
    assert chunks[0].candidates[0].finish_reason == types.FinishReason.MAX_TOKENS  # type: ignore[index]
    assert chunks[0].candidates[0].content.parts[0].text == ""  # type: ignore[index, union-attr]


def test_stream_chat_accumulates_history() -> None:
    replies = iter([completion(text="First.", reasoning="r1"), completion(text="Second.")])
    gateway = Gateway(lambda _request: next(replies))
    chat = client(gateway).chats.create(model="m")
    assert "".join(c.text or "" for c in chat.send_message_stream("one")) == "First."
    assert "".join(c.text or "" for c in chat.send_message_stream("two")) == "Second."
    assert [m.role for m in gateway.requests[1].messages] == ["user", "assistant", "user"]
    # The SDK records each streamed chunk as its own model content; they decode back into one assistant message.
    assert (gateway.requests[1].messages[1].reasoning, gateway.requests[1].messages[1].text) == ("r1", "First.")


# --- errors ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "exception", "name"),
    [
        (400, "invalid_request", errors.ClientError, "INVALID_ARGUMENT"),
        (401, "authentication", errors.ClientError, "UNAUTHENTICATED"),
        (404, "not_found", errors.ClientError, "NOT_FOUND"),
        (429, "overloaded", errors.ClientError, "RESOURCE_EXHAUSTED"),
        (500, "upstream", errors.ServerError, "INTERNAL"),
        (502, "upstream", errors.ServerError, "UNAVAILABLE"),
        (503, "overloaded", errors.ServerError, "UNAVAILABLE"),
        (504, "timeout", errors.ServerError, "DEADLINE_EXCEEDED"),
    ],
)
def test_errors_become_sdk_exceptions(status: int, kind: ErrorKind, exception: type[Exception], name: str) -> None:
    gateway = Gateway(answer(completion()), error=(status, kind, "contents[0].role: bad"))
    for call in (
        lambda c: c.models.generate_content(model="m", contents="x"),
        lambda c: list(c.models.generate_content_stream(model="m", contents="x")),
    ):
        with pytest.raises(exception) as info:
            call(client(gateway))
        error = info.value
        assert isinstance(error, errors.APIError)
        assert (error.code, error.status, error.message) == (status, name, "contents[0].role: bad")


def test_context_length_reads_as_geminis_own_error() -> None:
    vllm = (
        "This model's maximum context length is 32768 tokens. However, your request has 40000 input tokens. "
        "Please reduce the length of the input messages."
    )
    gateway = Gateway(answer(completion()), error=(400, "context_length", vllm))
    with pytest.raises(errors.ClientError) as info:
        client(gateway).models.generate_content(model="m", contents="x")
    assert (info.value.code, info.value.status) == (400, "INVALID_ARGUMENT")
    assert info.value.message == "The input token count (40000) exceeds the maximum number of tokens allowed (32768)."


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (
            "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
            "(4500 in the messages, 500 in the completion).",
            "The input token count (4500) exceeds the maximum number of tokens allowed (4096).",
        ),
        (
            "The input (9000 tokens) is longer than the model's context length (8192 tokens).",
            "The input token count (9000) exceeds the maximum number of tokens allowed (8192).",
        ),
        (
            "The input token count (1183134) exceeds the maximum number of tokens allowed (1048576).",
            "The input token count (1183134) exceeds the maximum number of tokens allowed (1048576).",
        ),
        ("prompt too long", "prompt too long"),
    ],
)
def test_gemini_context_message(message: str, expected: str) -> None:
    assert gemini_context_message(message) == expected
    assert CODEC.encode_error(400, "context_length", message) == {
        "error": {"code": 400, "message": expected, "status": "INVALID_ARGUMENT"}
    }


def test_codec_identity() -> None:
    assert CODEC.name == "google_genai" and CODEC.tool_call_id_prefix == "call_"


def test_response_body_shape() -> None:
    request = CODEC.decode_request({"contents": [{"parts": [{"text": "x"}]}]}, Route(api="google_genai", model="gm"))
    body: dict[str, Any] = CODEC.encode_response(request, completion(text="a", reasoning="b", calls=TWO_CALLS[:1]))
    assert body == {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "b", "thought": True},
                        {"text": "a"},
                        {"functionCall": {"id": "call_a", "name": "run_shell_command", "args": {"command": "ls -la"}}},
                    ],
                },
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 12, "candidatesTokenCount": 5, "totalTokenCount": 17},
        "modelVersion": "gm",
        "responseId": "resp_1",
    }
