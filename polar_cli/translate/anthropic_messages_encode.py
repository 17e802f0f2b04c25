"""Encoding side of the Anthropic Messages API: the Message object, its synthetic SSE stream, and the error body.

The content order mirrors what Claude returns: one ``thinking`` block (when the model reasoned), one ``text`` block,
then one ``tool_use`` block per call. Thinking signatures are empty strings: there is no Anthropic server to verify
them, and both Claude Code and the SDK only carry them back.
"""

from __future__ import annotations

from typing import Any

import orjson

from polar_cli.errors import ErrorKind
from polar_cli.translate.ir import ChatRequest, Completion, ToolCall, Usage
from polar_cli.wire.sse import sse_event

# The key an unparseable tool-call argument text is kept under: Anthropic's ``input`` must be an object.
RAW_ARGUMENTS_KEY = "_raw_arguments"
PROMPT_TOO_LONG = "prompt is too long"

_ERROR_TYPES: dict[ErrorKind, str] = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "not_found": "not_found_error",
    # Anthropic uses invalid_request_error "for other 4XX status codes not listed".
    "method_not_allowed": "invalid_request_error",
    "payload_too_large": "request_too_large",
    "unsupported_media_type": "invalid_request_error",
    "context_length": "invalid_request_error",
    "overloaded": "overloaded_error",
    "timeout": "timeout_error",
}
_UPSTREAM_ERROR_TYPES = {429: "rate_limit_error", 504: "timeout_error", 529: "overloaded_error"}


def encode_response(request: ChatRequest, completion: Completion) -> dict[str, Any]:
    """The non-streaming Message object for a completion.

    A tool call whose arguments are not a JSON object (the model sampled broken JSON) is still delivered, with its
    raw text as ``{"_raw_arguments": "<text>"}``, so the harness's own input validation reports it back to the model.
    """
    return _message(request, completion, _content(completion), _stop_reason(completion), _usage(completion.usage))


def encode_stream(request: ChatRequest, completion: Completion) -> list[bytes]:
    """The final answer as Anthropic's SSE event grammar.

    ``message_start``, ``ping``, then per content block ``content_block_start`` / ``content_block_delta`` /
    ``content_block_stop``, then ``message_delta`` (stop reason and cumulative usage) and ``message_stop``. Each block's
    text arrives as one delta: the stream is a replay of a finished answer, not live sampling.
    """
    start_usage = {**_usage(completion.usage), "output_tokens": 0}
    frames = [
        _event("message_start", message=_message(request, completion, [], None, start_usage)),
        _event("ping"),
    ]
    for index, block in enumerate(_content(completion)):
        frames.extend(_block_events(index, block))
    frames.append(
        _event(
            "message_delta",
            delta={"stop_reason": _stop_reason(completion), "stop_sequence": None},
            usage=_usage(completion.usage),
        )
    )
    frames.append(_event("message_stop"))
    return frames


def encode_error(status: int, kind: ErrorKind, message: str) -> dict[str, Any]:
    """Anthropic's error body ``{"type": "error", "error": {"type", "message"}}``.

    ``context_length`` is a 400 ``invalid_request_error`` whose message starts with "prompt is too long", the wording
    Claude Code and Pi look for before compacting the conversation.
    """
    if kind == "upstream":
        error_type = _UPSTREAM_ERROR_TYPES.get(status, "api_error")
    else:
        error_type = _ERROR_TYPES.get(kind, "api_error")
    if kind == "context_length":
        message = _prompt_too_long_message(message)
    return {"type": "error", "error": {"type": error_type, "message": message}}


def _prompt_too_long_message(message: str) -> str:
    # Anthropic's own wording is "prompt is too long: 210883 tokens > 200000 maximum"; an upstream's wording is kept
    # after the marker phrase so the numbers stay readable.
    if message.lower().startswith(PROMPT_TOO_LONG):
        return message
    return f"{PROMPT_TOO_LONG}: {message}"


def _message(
    request: ChatRequest,
    completion: Completion,
    content: list[dict[str, Any]],
    stop_reason: str | None,
    usage: dict[str, Any],
) -> dict[str, Any]:
    return {
        "id": _message_id(completion.id),
        "type": "message",
        "role": "assistant",
        # The harness's own model name: Claude Code keys behaviour (context window, pricing) on it.
        "model": request.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def _message_id(completion_id: str) -> str:
    return completion_id if completion_id.startswith("msg_") else f"msg_{completion_id}"


def _content(completion: Completion) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if completion.reasoning:
        blocks.append({"type": "thinking", "thinking": completion.reasoning, "signature": ""})
    # A turn without tool calls always carries a text block, even an empty one: callers read content[-1].text.
    if completion.text or not completion.tool_calls:
        blocks.append({"type": "text", "text": completion.text})
    blocks.extend(
        {"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call)}
        for call in completion.tool_calls
    )
    return blocks


def _tool_input(call: ToolCall) -> dict[str, Any]:
    try:
        value = orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        return {RAW_ARGUMENTS_KEY: call.arguments}
    if isinstance(value, dict):
        return value
    return {RAW_ARGUMENTS_KEY: call.arguments}


def _stop_reason(completion: Completion) -> str:
    if completion.finish_reason == "length":
        return "max_tokens"
    # Some servers report "stop" alongside parsed tool calls; Anthropic clients run tools only on "tool_use".
    if completion.tool_calls:
        return "tool_use"
    if completion.finish_reason == "content_filter":
        return "refusal"
    return "end_turn"


def _usage(usage: Usage) -> dict[str, Any]:
    # Anthropic counts cache reads apart from input_tokens; harnesses add them up to size the context.
    cached = min(usage.cached_tokens, usage.prompt_tokens)
    return {
        "input_tokens": usage.prompt_tokens - cached,
        "output_tokens": usage.completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
    }


def _block_events(index: int, block: dict[str, Any]) -> list[bytes]:
    kind = block["type"]
    if kind == "thinking":
        start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    elif kind == "text":
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": block["text"]}] if block["text"] else []
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}]
    return [
        _event("content_block_start", index=index, content_block=start),
        *(_event("content_block_delta", index=index, delta=delta) for delta in deltas),
        _event("content_block_stop", index=index),
    ]


def _event(kind: str, **fields: Any) -> bytes:
    return sse_event({"type": kind, **fields}, event=kind)
