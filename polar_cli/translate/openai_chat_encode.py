"""The IR's answer in OpenAI Chat Completions shape: the ``chat.completion`` body, the ``chat.completion.chunk`` SSE
stream, and the ``{"error": ...}`` body.

Stream grammar (what OpenAI sends and what the SDKs' accumulators expect), one choice, index 0:

    role chunk          delta {"role": "assistant", "content": ""}  (content null when the answer is tool calls only)
    reasoning chunk     delta {"reasoning_content": ...}           when the model reasoned (vLLM / DeepSeek field name)
    content chunk       delta {"content": ...}                     when there is text
    per tool call i     delta {"tool_calls": [{"index": i, "id", "type", "function": {"name", "arguments": ""}}]}
                        then {"tool_calls": [{"index": i, "function": {"arguments": ...}}]}
    finish chunk        delta {}, finish_reason set
    usage chunk         choices [], usage                          only with stream_options.include_usage
    data: [DONE]

With ``include_usage`` every earlier chunk carries ``"usage": null``, as OpenAI does: the accumulators overwrite usage
on every chunk, so the real numbers must come last.

Tool-call arguments are sent exactly as the model sampled them, even when they are not valid JSON: the harness then
reports the parse error to the model as a failed tool call, which is what the model would see from OpenAI itself.
"""

from __future__ import annotations

from typing import Any

from polar_cli.errors import ErrorKind
from polar_cli.translate import ir
from polar_cli.wire.sse import SSE_DONE, sse_event

# OpenAI Chat has no "abort": a generation the server cut short did not end naturally, which "length" says.
_FINISH_REASONS: dict[ir.FinishReason, str] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
    "abort": "length",
}

# (error.type, error.code) per kind, as api.openai.com answers them.
_ERRORS: dict[ErrorKind, tuple[str, str | None]] = {
    "invalid_request": ("invalid_request_error", None),
    "authentication": ("invalid_request_error", "invalid_api_key"),
    "not_found": ("invalid_request_error", None),
    "method_not_allowed": ("invalid_request_error", None),
    "payload_too_large": ("invalid_request_error", None),
    "unsupported_media_type": ("invalid_request_error", None),
    "context_length": ("invalid_request_error", "context_length_exceeded"),
    "upstream": ("server_error", None),
    "overloaded": ("server_error", None),
    "timeout": ("server_error", None),
}

# OpenAI's own overflow wording; Pi and opencode match on it (Pi: /exceeds the context window/i) to compact history.
_CONTEXT_OVERFLOW = "Your input exceeds the context window of this model."


def encode_response(request: ir.ChatRequest, completion: ir.Completion) -> dict[str, Any]:
    """The non-streaming ``chat.completion`` body."""
    message: dict[str, Any] = {"role": "assistant", "content": _content(completion), "refusal": None}
    if completion.reasoning:
        message["reasoning_content"] = completion.reasoning
    if completion.tool_calls:
        message["tool_calls"] = [_tool_call(call) for call in completion.tool_calls]
    return {
        "id": completion.id,
        "object": "chat.completion",
        "created": completion.created,
        "model": completion.model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _FINISH_REASONS[completion.finish_reason],
            }
        ],
        "usage": _usage(completion.usage),
    }


def encode_stream(request: ir.ChatRequest, completion: ir.Completion) -> list[bytes]:
    """The synthetic ``chat.completion.chunk`` stream of the final answer, ending with ``data: [DONE]``."""
    head: dict[str, Any] = {
        "id": completion.id,
        "object": "chat.completion.chunk",
        "created": completion.created,
        "model": completion.model,
    }
    tail: dict[str, Any] = {"usage": None} if request.include_usage else {}

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return sse_event({**head, "choices": [choice], **tail})

    frames = [chunk({"role": "assistant", "content": "" if _content(completion) is not None else None})]
    if completion.reasoning:
        frames.append(chunk({"reasoning_content": completion.reasoning}))
    if completion.text:
        frames.append(chunk({"content": completion.text}))
    for index, call in enumerate(completion.tool_calls):
        frames.extend(chunk({"tool_calls": [delta]}) for delta in _tool_call_deltas(index, call))
    frames.append(chunk({}, _FINISH_REASONS[completion.finish_reason]))
    if request.include_usage:
        frames.append(sse_event({**head, "choices": [], "usage": _usage(completion.usage)}))
    frames.append(SSE_DONE)
    return frames


def encode_error(status: int, kind: ErrorKind, message: str) -> dict[str, Any]:
    """OpenAI's error body. ``context_length`` becomes OpenAI's ``context_length_exceeded`` with its wording."""
    error_type, code = _ERRORS[kind]
    param: str | None = None
    if kind == "context_length":
        param = "messages"
        if _CONTEXT_OVERFLOW.lower() not in message.lower():
            message = f"{_CONTEXT_OVERFLOW} {message}".rstrip()
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def _content(completion: ir.Completion) -> str | None:
    # OpenAI sends null content on a tool-calls-only answer, and "" for an answer that is empty altogether.
    if not completion.text and completion.tool_calls:
        return None
    return completion.text


def _tool_call(call: ir.ToolCall) -> dict[str, Any]:
    if call.kind == "custom":
        return {"id": call.id, "type": "custom", "custom": {"name": call.name, "input": ir.custom_input(call)}}
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}


def _tool_call_deltas(index: int, call: ir.ToolCall) -> list[dict[str, Any]]:
    # Name first with empty input, then the input: OpenAI's order, and the one clients that emit a call as soon as
    # its arguments parse (the AI SDK) are written against.
    if call.kind == "custom":
        body, key, value = "custom", "input", ir.custom_input(call)
    else:
        body, key, value = "function", "arguments", call.arguments
    deltas: list[dict[str, Any]] = [
        {"index": index, "id": call.id, "type": body, body: {"name": call.name, key: ""}},
    ]
    if value:
        deltas.append({"index": index, body: {key: value}})
    return deltas


def _usage(usage: ir.Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
    }
