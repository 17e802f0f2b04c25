"""The official openai SDK parses what the Responses codec encodes: bodies, SSE streams, the stream helper, errors.

No server: the SDK talks to an httpx.MockTransport that decodes the SDK's own request with the codec and answers
with the codec's bytes.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import orjson
import pydantic
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from polar_cli.errors import ErrorKind
from polar_cli.translate import ir
from polar_cli.translate.codec import Route
from polar_cli.translate.openai_responses import CODEC
from polar_cli.translate.openai_responses_encode import encode_failed_stream

ROUTE = Route(api="openai_responses")
USAGE = ir.Usage(prompt_tokens=20, completion_tokens=9, reasoning_tokens=4, cached_tokens=6)
SH_TOOL: dict[str, Any] = {
    "type": "function",
    "name": "sh",
    "description": "run a command",
    "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
    "strict": True,
}
PATCH_TOOL: dict[str, Any] = {
    "type": "custom",
    "name": "apply_patch",
    "description": "edit files",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
}
EVENTS = pydantic.TypeAdapter(ResponseStreamEvent)


def completion(
    text: str = "hello",
    *,
    reasoning: str | None = None,
    calls: tuple[ir.ToolCall, ...] = (),
    finish: ir.FinishReason = "stop",
) -> ir.Completion:
    return ir.Completion("cmpl7", "served-model", 1_700_000_000, text, reasoning, calls, finish, USAGE)


TWO_CALLS = (
    ir.ToolCall("call_a1", "sh", '{"cmd": "ls"}'),
    ir.ToolCall("call_b2", "sh", '{"cmd": "pwd"}'),
)
CUSTOM_CALL = ir.ToolCall("call_c3", "apply_patch", '{"input": "*** Begin Patch\\n*** End Patch\\n"}', "custom")


class Gateway:
    """A fake gateway: decodes what the SDK sent and answers with the codec's encoding of a fixed completion."""

    def __init__(self, answer: ir.Completion) -> None:
        self.answer = answer
        self.requests: list[ir.ChatRequest] = []

    def __call__(self, http_request: httpx.Request) -> httpx.Response:
        assert http_request.url.path == "/v1/responses"
        request = CODEC.decode_request(orjson.loads(http_request.content), ROUTE)
        self.requests.append(request)
        if request.stream:
            body = b"".join(CODEC.encode_stream(request, self.answer))
            return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})
        return httpx.Response(200, json=CODEC.encode_response(request, self.answer))


def sdk(handler: Any) -> openai.OpenAI:
    # The SDK takes a plain httpx client next to its own httpx2 one; its annotation names only the latter.
    client: Any = httpx.Client(transport=httpx.MockTransport(handler))
    return openai.OpenAI(api_key="sk-test", base_url="http://gw/v1", max_retries=0, http_client=client)


def frames(request: ir.ChatRequest, answer: ir.Completion) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for frame in CODEC.encode_stream(request, answer):
        event_line, data_line, blank = frame.decode().split("\n", 2)
        assert blank == "\n"
        out.append((event_line.removeprefix("event: "), json.loads(data_line.removeprefix("data: "))))
    return out


def request_for(**body: Any) -> ir.ChatRequest:
    return CODEC.decode_request({"model": "gpt-x", "input": "hi", **body}, ROUTE)


# --- non-streaming ---------------------------------------------------------------------------------------------


def test_plain_text() -> None:
    gateway = Gateway(completion())
    response = sdk(gateway).responses.create(model="gpt-x", input="hi", instructions="be brief")
    assert response.output_text == "hello"
    assert (response.id, response.status, response.model) == ("resp_cmpl7", "completed", "served-model")
    assert response.output[0].type == "message" and response.output[0].id == "msg_cmpl7"
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens, response.usage.total_tokens) == (20, 9, 29)
    assert response.usage.input_tokens_details.cached_tokens == 6
    assert response.usage.output_tokens_details.reasoning_tokens == 4
    assert gateway.requests[0].messages[0] == ir.Message(role="system", content=(ir.Text("be brief"),))


def test_reasoning_text_and_tool_calls() -> None:
    answer = completion(
        "calling", reasoning="I should list files.", calls=(*TWO_CALLS, CUSTOM_CALL), finish="tool_calls"
    )
    response = sdk(Gateway(answer)).responses.create(model="gpt-x", input="hi", tools=[SH_TOOL, PATCH_TOOL])  # type: ignore[list-item]
    reasoning, message, first, second, custom = response.output
    assert reasoning.type == "reasoning" and reasoning.id == "rs_cmpl7"
    assert [s.text for s in reasoning.summary] == ["I should list files."]
    assert message.type == "message" and response.output_text == "calling"
    assert first.type == "function_call" and second.type == "function_call"
    assert [(c.id, c.call_id, c.name, json.loads(c.arguments)) for c in (first, second)] == [
        ("fc_a1", "call_a1", "sh", {"cmd": "ls"}),
        ("fc_b2", "call_b2", "sh", {"cmd": "pwd"}),
    ]
    assert custom.type == "custom_tool_call"
    assert (custom.id, custom.call_id, custom.name, custom.input) == (
        "ctc_c3",
        "call_c3",
        "apply_patch",
        "*** Begin Patch\n*** End Patch\n",
    )
    assert response.status == "completed"


def test_finish_by_length_is_incomplete() -> None:
    response = sdk(Gateway(completion("trunc", finish="length"))).responses.create(model="gpt-x", input="hi")
    assert response.status == "incomplete"
    assert response.incomplete_details is not None and response.incomplete_details.reason == "max_output_tokens"
    assert response.output[0].type == "message" and response.output[0].status == "incomplete"
    assert response.output_text == "trunc"


def test_invalid_json_arguments_pass_through_unchanged() -> None:
    answer = completion("", calls=(ir.ToolCall("call_z", "sh", '{"cmd": "ls'),), finish="tool_calls")
    response = sdk(Gateway(answer)).responses.create(model="gpt-x", input="hi")
    (call,) = response.output  # no text: no message item
    assert call.type == "function_call" and call.arguments == '{"cmd": "ls'


def test_empty_answer_still_has_a_message() -> None:
    response = sdk(Gateway(completion(""))).responses.create(model="gpt-x", input="hi")
    assert [o.type for o in response.output] == ["message"]
    assert response.output_text == ""


def test_body_echoes_request_and_validates_strictly() -> None:
    request = request_for(
        tools=[SH_TOOL, PATCH_TOOL, {"type": "web_search"}],
        tool_choice={"type": "custom", "name": "apply_patch"},
        parallel_tool_calls=False,
        max_output_tokens=64,
        temperature=0.2,
        reasoning={"effort": "low"},
        text={"format": {"type": "json_schema", "name": "o", "schema": {"type": "object"}}},
    )
    body = CODEC.encode_response(request, completion(reasoning="r", calls=(*TWO_CALLS, CUSTOM_CALL)))
    parsed = Response.model_validate(body)  # full validation, not the SDK's lenient construct
    assert [t.type for t in parsed.tools] == ["function", "custom"]
    assert body["tool_choice"] == {"type": "custom", "name": "apply_patch"}
    assert (parsed.parallel_tool_calls, parsed.max_output_tokens, parsed.temperature) == (False, 64, 0.2)
    assert body["reasoning"] == {"effort": "low", "summary": None}
    assert body["text"] == {
        "format": {"type": "json_schema", "name": "o", "schema": {"type": "object"}, "strict": False}
    }
    assert body["tools"][0]["parameters"] == SH_TOOL["parameters"]


# --- streaming -------------------------------------------------------------------------------------------------


def test_stream_event_grammar() -> None:
    answer = completion("hi there", reasoning="hmm", calls=(TWO_CALLS[0], CUSTOM_CALL), finish="tool_calls")
    events = frames(request_for(stream=True), answer)
    assert [name for name, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    for name, data in events:
        assert data["type"] == name
        EVENTS.validate_python(data)  # every event passes the SDK's full pydantic validation
    assert events[0][1]["response"]["status"] == "in_progress" and events[0][1]["response"]["output"] == []
    assert [data["output_index"] for name, data in events if name == "response.output_item.done"] == [0, 1, 2, 3]
    assert events[-1][1]["response"] == CODEC.encode_response(request_for(), answer)


def test_stream_iterated_with_create() -> None:
    answer = completion("streamed", reasoning="think", calls=TWO_CALLS, finish="tool_calls")
    events = list(sdk(Gateway(answer)).responses.create(model="gpt-x", input="hi", stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    thinking = "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta")
    args = [e.arguments for e in events if e.type == "response.function_call_arguments.done"]
    assert (text, thinking, args) == ("streamed", "think", ['{"cmd": "ls"}', '{"cmd": "pwd"}'])
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.usage is not None and completed.response.usage.total_tokens == 29


def test_stream_helper_final_response() -> None:
    answer = completion("final", reasoning="plan", calls=(*TWO_CALLS, CUSTOM_CALL), finish="tool_calls")
    client = sdk(Gateway(answer))
    with client.responses.stream(model="gpt-x", input="hi", tools=[SH_TOOL, PATCH_TOOL]) as stream:  # type: ignore[list-item]
        deltas = [e.snapshot for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert deltas == ["final"]
    assert final.output_text == "final"
    reasoning, _, first, second, custom = final.output
    assert reasoning.type == "reasoning" and reasoning.summary[0].text == "plan"
    # strict tools: the helper parsed the arguments against the schema it sent
    assert first.type == "function_call" and first.parsed_arguments == {"cmd": "ls"}
    assert second.type == "function_call" and second.parsed_arguments == {"cmd": "pwd"}
    assert custom.type == "custom_tool_call" and custom.input == "*** Begin Patch\n*** End Patch\n"
    assert final.usage is not None and final.usage.output_tokens == 9


def test_stream_finish_by_length_ends_with_incomplete() -> None:
    client = sdk(Gateway(completion("cut", finish="length")))
    events = list(client.responses.create(model="gpt-x", input="hi", stream=True))
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details is not None
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "cut"
    # As against OpenAI itself, the helper only builds a final response from response.completed.
    with client.responses.stream(model="gpt-x", input="hi") as stream, pytest.raises(RuntimeError, match="completed"):
        stream.get_final_response()


# --- errors ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "exc_type", "code"),
    [
        (400, "invalid_request", openai.BadRequestError, None),
        (400, "context_length", openai.BadRequestError, "context_length_exceeded"),
        (401, "authentication", openai.AuthenticationError, "invalid_api_key"),
        (404, "not_found", openai.NotFoundError, "not_found"),
        (502, "upstream", openai.InternalServerError, "server_error"),
        (503, "overloaded", openai.InternalServerError, "server_is_overloaded"),
    ],
)
def test_errors_parse_into_sdk_exceptions(
    status: int, kind: ErrorKind, exc_type: type[openai.APIStatusError], code: str | None
) -> None:
    body = CODEC.encode_error(status, kind, "boom")
    client = sdk(lambda _: httpx.Response(status, json=body))
    with pytest.raises(exc_type) as info:
        client.responses.create(model="gpt-x", input="hi")
    assert info.value.status_code == status
    assert info.value.code == code
    assert "boom" in info.value.message


def test_context_length_error_uses_openai_wording() -> None:
    error = CODEC.encode_error(400, "context_length", "prompt has 9000 tokens, limit 8192")["error"]
    assert error == {
        "message": "Your input exceeds the context window of this model. Please adjust your input and try again. "
        "(prompt has 9000 tokens, limit 8192)",
        "type": "invalid_request_error",
        "param": "input",
        "code": "context_length_exceeded",
    }


def test_failed_stream_carries_context_length_code() -> None:
    chunks = encode_failed_stream(
        request_for(stream=True), completion_id="e1", created=5, kind="context_length", message=""
    )
    client = sdk(lambda _: httpx.Response(200, content=b"".join(chunks), headers={"content-type": "text/event-stream"}))
    events = list(client.responses.create(model="gpt-x", input="hi", stream=True))
    assert [e.type for e in events] == ["response.created", "response.in_progress", "response.failed"]
    failed = events[-1]
    assert failed.type == "response.failed" and failed.response.status == "failed"
    assert failed.response.error is not None
    # What Codex checks to report ContextWindowExceeded; the SDK's Literal does not list it, the wire does.
    assert failed.response.error.to_dict()["code"] == "context_length_exceeded"
    assert failed.response.error.message.startswith("Your input exceeds the context window")
