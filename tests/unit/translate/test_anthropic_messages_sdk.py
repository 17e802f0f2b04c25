"""Encoding Anthropic Messages answers, checked by parsing them with the official SDK over a mock transport."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx2
import orjson
import pytest

from polar_cli.errors import ErrorKind
from polar_cli.translate.anthropic_messages import CODEC
from polar_cli.translate.codec import Route
from polar_cli.translate.ir import ChatRequest, Completion, ToolCall, Usage

MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
USAGE = Usage(prompt_tokens=120, completion_tokens=30, cached_tokens=100)


def _request(stream: bool) -> ChatRequest:
    body = {"model": "claude-lab", "max_tokens": 256, "messages": MESSAGES, "stream": stream}
    return CODEC.decode_request(body, Route(api="anthropic_messages"))


def _completion(
    text: str = "",
    reasoning: str | None = None,
    calls: tuple[ToolCall, ...] = (),
    finish: Any = "stop",
    usage: Usage = USAGE,
) -> Completion:
    return Completion(
        id="cmpl-7",
        model="Qwen/Qwen3-8B",
        created=1,
        text=text,
        reasoning=reasoning,
        tool_calls=calls,
        finish_reason=finish,
        usage=usage,
    )


def _client(handler: Callable[[httpx2.Request], httpx2.Response]) -> anthropic.Anthropic:
    transport = httpx2.MockTransport(handler)
    return anthropic.Anthropic(
        api_key="sk-test", base_url="http://gateway", http_client=httpx2.Client(transport=transport), max_retries=0
    )


def _serving(completion: Completion) -> anthropic.Anthropic:
    def handler(request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages"
        stream = bool(orjson.loads(request.content).get("stream"))
        if stream:
            frames = CODEC.encode_stream(_request(True), completion)
            return httpx2.Response(200, content=b"".join(frames), headers={"content-type": "text/event-stream"})
        return httpx2.Response(200, json=CODEC.encode_response(_request(False), completion))

    return _client(handler)


def _both(completion: Completion) -> Iterator[anthropic.types.Message]:
    """The SDK's parse of the JSON answer, then its stream accumulator's final message."""
    client = _serving(completion)
    yield client.messages.create(model="claude-lab", max_tokens=256, messages=MESSAGES)
    with client.messages.stream(model="claude-lab", max_tokens=256, messages=MESSAGES) as stream:
        yield stream.get_final_message()


CALLS = (
    ToolCall(id="toolu_a1", name="Bash", arguments='{"command": "echo hi > hello.txt", "timeout": 5}'),
    ToolCall(id="toolu_b2", name="Read", arguments='{"path": "/testbed/ü.py", "lines": [1, 2]}'),
    ToolCall(id="toolu_c3", name="ListAgents", arguments="{}"),
)


def test_plain_text() -> None:
    for message in _both(_completion(text="done")):
        assert message.id == "msg_cmpl-7"
        assert message.model == "claude-lab"
        assert [b.type for b in message.content] == ["text"]
        assert message.content[0].text == "done"  # type: ignore[union-attr]
        assert message.stop_reason == "end_turn"
        assert message.stop_sequence is None
        assert message.usage.input_tokens == 20
        assert message.usage.cache_read_input_tokens == 100
        assert message.usage.cache_creation_input_tokens == 0
        assert message.usage.output_tokens == 30


def test_reasoning_then_text() -> None:
    for message in _both(_completion(text="It is 4.", reasoning="2 + 2 = 4")):
        thinking, text = message.content
        assert thinking.type == "thinking"
        assert thinking.thinking == "2 + 2 = 4"
        assert thinking.signature == ""
        assert text.type == "text"
        assert text.text == "It is 4."
        assert message.stop_reason == "end_turn"


def test_several_tool_calls() -> None:
    completion = _completion(text="Let me look.", reasoning="plan", calls=CALLS, finish="tool_calls")
    for message in _both(completion):
        assert [b.type for b in message.content] == ["thinking", "text", "tool_use", "tool_use", "tool_use"]
        uses = [b for b in message.content if b.type == "tool_use"]
        assert [(u.id, u.name) for u in uses] == [
            ("toolu_a1", "Bash"),
            ("toolu_b2", "Read"),
            ("toolu_c3", "ListAgents"),
        ]
        assert uses[0].input == {"command": "echo hi > hello.txt", "timeout": 5}
        assert uses[1].input == {"path": "/testbed/ü.py", "lines": [1, 2]}
        assert uses[2].input == {}
        assert message.stop_reason == "tool_use"


def test_tool_calls_alone_have_no_text_block_and_stop_on_tool_use() -> None:
    # Servers may report "stop" next to parsed tool calls; the harness must still run them.
    for message in _both(_completion(calls=CALLS[:1], finish="stop")):
        assert [b.type for b in message.content] == ["tool_use"]
        assert message.stop_reason == "tool_use"


def test_custom_tool_call_keeps_its_wrapper_object() -> None:
    # Anthropic has no freeform tools; a custom call still carries the {"input": ...} object upstream saw.
    call = ToolCall(id="toolu_p", name="apply_patch", arguments='{"input": "*** Begin Patch"}', kind="custom")
    for message in _both(_completion(calls=(call,), finish="tool_calls")):
        assert message.content[0].input == {"input": "*** Begin Patch"}  # type: ignore[union-attr]


@pytest.mark.parametrize("arguments", ['{"command": "ls"', "[1, 2]", '"ls"', ""])
def test_arguments_that_are_not_a_json_object_are_kept_raw(arguments: str) -> None:
    call = ToolCall(id="toolu_x", name="Bash", arguments=arguments)
    for message in _both(_completion(calls=(call,), finish="tool_calls")):
        assert message.content[0].input == {"_raw_arguments": arguments}  # type: ignore[union-attr]


def test_finish_by_length() -> None:
    for message in _both(_completion(text="The answer is", finish="length")):
        assert message.content[0].text == "The answer is"  # type: ignore[union-attr]
        assert message.stop_reason == "max_tokens"


def test_empty_answer_still_has_a_text_block() -> None:
    for message in _both(_completion(text="")):
        assert [(b.type, b.text) for b in message.content] == [("text", "")]  # type: ignore[union-attr]


def test_content_filter_is_a_refusal() -> None:
    for message in _both(_completion(text="", finish="content_filter")):
        assert message.stop_reason == "refusal"


def test_message_id_keeps_an_existing_msg_prefix() -> None:
    completion = Completion("msg_01", "m", 1, "x", None, (), "stop", Usage(1, 1))
    assert CODEC.encode_response(_request(False), completion)["id"] == "msg_01"


def test_stream_event_grammar() -> None:
    completion = _completion(text="Let me look.", reasoning="plan", calls=CALLS[:1], finish="tool_calls")
    frames = CODEC.encode_stream(_request(True), completion)
    events = []
    for frame in frames:
        event_line, data_line, blank, end = frame.split(b"\n")
        assert (blank, end) == (b"", b"")
        data = orjson.loads(data_line.removeprefix(b"data: "))
        assert event_line == b"event: " + data["type"].encode()
        events.append(data)
    summary = [(e["type"], e.get("index"), e.get("delta", {}).get("type")) for e in events]
    assert summary == [
        ("message_start", None, None),
        ("ping", None, None),
        ("content_block_start", 0, None),
        ("content_block_delta", 0, "thinking_delta"),
        ("content_block_delta", 0, "signature_delta"),
        ("content_block_stop", 0, None),
        ("content_block_start", 1, None),
        ("content_block_delta", 1, "text_delta"),
        ("content_block_stop", 1, None),
        ("content_block_start", 2, None),
        ("content_block_delta", 2, "input_json_delta"),
        ("content_block_stop", 2, None),
        ("message_delta", None, None),
        ("message_stop", None, None),
    ]
    start = events[0]["message"]
    assert (start["content"], start["stop_reason"], start["usage"]["output_tokens"]) == ([], None, 0)
    assert events[9]["content_block"] == {"type": "tool_use", "id": "toolu_a1", "name": "Bash", "input": {}}
    assert events[12]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert events[12]["usage"]["output_tokens"] == 30


def test_sdk_raw_stream_and_text_helpers() -> None:
    client = _serving(_completion(text="done", reasoning="hmm"))
    with client.messages.stream(model="claude-lab", max_tokens=256, messages=MESSAGES) as stream:
        assert "".join(stream.text_stream) == "done"
    raw = client.messages.create(model="claude-lab", max_tokens=256, messages=MESSAGES, stream=True)
    types = [event.type for event in raw]
    assert types[0] == "message_start"
    assert types[-2:] == ["message_delta", "message_stop"]


# --- errors ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "error_type", "exception"),
    [
        (400, "invalid_request", "invalid_request_error", anthropic.BadRequestError),
        (401, "authentication", "authentication_error", anthropic.AuthenticationError),
        (404, "not_found", "not_found_error", anthropic.NotFoundError),
        (405, "method_not_allowed", "invalid_request_error", anthropic.APIStatusError),
        (413, "payload_too_large", "request_too_large", anthropic.ContentTooLargeError),
        (415, "unsupported_media_type", "invalid_request_error", anthropic.APIStatusError),
        (429, "upstream", "rate_limit_error", anthropic.RateLimitError),
        (502, "upstream", "api_error", anthropic.InternalServerError),
        (503, "overloaded", "overloaded_error", anthropic.ServiceUnavailableError),
        (529, "overloaded", "overloaded_error", anthropic.OverloadedError),
        (504, "timeout", "timeout_error", anthropic.GatewayTimeoutError),
    ],
)
def test_errors_parse_into_sdk_exceptions(
    status: int, kind: ErrorKind, error_type: str, exception: type[anthropic.APIStatusError]
) -> None:
    body = CODEC.encode_error(status, kind, "something went wrong")
    assert body == {"type": "error", "error": {"type": error_type, "message": "something went wrong"}}
    client = _client(lambda request: httpx2.Response(status, json=body))
    with pytest.raises(exception) as info:
        client.messages.create(model="claude-lab", max_tokens=256, messages=MESSAGES)
    assert info.value.status_code == status
    assert info.value.type == error_type
    assert info.value.api_message == "something went wrong"


def test_context_length_is_anthropics_prompt_too_long() -> None:
    body = CODEC.encode_error(400, "context_length", "prompt is too long: 40960 tokens > 32768 maximum")
    assert body["error"] == {
        "type": "invalid_request_error",
        "message": "prompt is too long: 40960 tokens > 32768 maximum",
    }
    client = _client(lambda request: httpx2.Response(400, json=body))
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model="claude-lab", max_tokens=256, messages=MESSAGES)
    assert info.value.api_message == "prompt is too long: 40960 tokens > 32768 maximum"


def test_context_length_wording_from_upstream_gets_the_marker_phrase() -> None:
    upstream = "This model's maximum context length is 32768 tokens. However, you requested 40960 tokens."
    body = CODEC.encode_error(400, "context_length", upstream)
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"] == f"prompt is too long: {upstream}"
