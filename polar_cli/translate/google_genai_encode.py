"""Encoding a `Completion` as Gemini's ``GenerateContentResponse``, its ``alt=sse`` stream, and Google's error body.

One candidate, whose ``content.parts`` are: the reasoning as one ``{"text", "thought": true}`` part, the answer text as
one ``{"text"}`` part, then one ``{"functionCall": {id, name, args}}`` part per tool call. ``usageMetadata`` follows
Gemini's accounting: ``candidatesTokenCount`` excludes the thinking, which is counted in ``thoughtsTokenCount``.

The stream is a series of complete ``GenerateContentResponse`` chunks as bare ``data:`` frames (no ``event:`` lines,
no terminator): one chunk per part kind, the last one also carrying ``finishReason`` and ``usageMetadata``. Gemini CLI
drops chunks whose parts are empty, so the finish reason rides on the last content chunk instead of an empty one.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from polar_cli.errors import ErrorKind
from polar_cli.translate.ir import ChatRequest, Completion, FinishReason, Usage
from polar_cli.wire.sse import sse_event

# Key under which arguments that are not a JSON object travel to the harness (see `quirk_wrap_invalid_arguments`).
RAW_ARGUMENTS_KEY = "_raw_arguments"

_FINISH_REASONS: dict[FinishReason, str] = {
    "stop": "STOP",
    "tool_calls": "STOP",  # Gemini has no tool-use finish reason: a turn that calls functions ends with STOP.
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
    "abort": "OTHER",
}

# google.rpc.Code names, as Google's HTTP errors carry them in ``error.status``.
_STATUS_BY_KIND: dict[ErrorKind, str] = {
    "invalid_request": "INVALID_ARGUMENT",
    "authentication": "UNAUTHENTICATED",
    "not_found": "NOT_FOUND",
    "method_not_allowed": "UNIMPLEMENTED",
    "payload_too_large": "INVALID_ARGUMENT",
    "unsupported_media_type": "INVALID_ARGUMENT",
    "context_length": "INVALID_ARGUMENT",
    "upstream": "UNAVAILABLE",
    "overloaded": "UNAVAILABLE",
    "timeout": "DEADLINE_EXCEEDED",
}


def encode_response(request: ChatRequest, completion: Completion) -> dict[str, Any]:
    """The ``generateContent`` response body."""
    parts = [*_thought_parts(completion), *_text_parts(completion), *_call_parts(completion)]
    return _chunk(request, completion, parts or [{"text": ""}], final=True)


def encode_stream(request: ChatRequest, completion: Completion) -> list[bytes]:
    """The ``streamGenerateContent?alt=sse`` frames: one chunk per part kind, the last with finish reason and usage."""
    groups = [g for g in (_thought_parts(completion), _text_parts(completion), _call_parts(completion)) if g]
    if not groups:
        groups = [[{"text": ""}]]
    last = len(groups) - 1
    return [sse_event(_chunk(request, completion, parts, final=i == last)) for i, parts in enumerate(groups)]


def encode_json_stream(request: ChatRequest, completion: Completion) -> bytes:
    """``streamGenerateContent`` without ``alt=sse``: one JSON array of response chunks (here the whole answer)."""
    return b"[" + orjson.dumps(encode_response(request, completion)) + b"]"


def encode_error(status: int, kind: ErrorKind, message: str) -> dict[str, Any]:
    """Google's error body: ``{"error": {"code", "message", "status"}}``; a context overflow reads as Gemini's own."""
    if kind == "context_length":
        message = gemini_context_message(message)
    name = "RESOURCE_EXHAUSTED" if status == 429 else _STATUS_BY_KIND.get(kind, "UNKNOWN")
    if kind == "upstream" and status == 500:
        name = "INTERNAL"
    return {"error": {"code": status, "message": message, "status": name}}


def gemini_context_message(message: str) -> str:
    """Gemini's context-overflow wording, built from the inference server's numbers when its message has them.

    vLLM says "maximum context length is M tokens ... your request has N input tokens" (or "N in the messages"),
    SGLang "The input (N tokens) is longer than the model's context length (M tokens)". A message that already reads
    like Gemini's, or that has neither number, passes through unchanged.
    """
    if "input token count" in message:
        return message
    limit = re.search(r"maximum context length (?:is|of) (\d+)|context length \((\d+) tokens\)", message)
    used = re.search(r"(\d+) input tokens|(\d+) in the messages|input \((\d+) tokens\)", message)
    if limit is None or used is None:
        return message
    m = next(g for g in limit.groups() if g)
    n = next(g for g in used.groups() if g)
    return f"The input token count ({n}) exceeds the maximum number of tokens allowed ({m})."


def quirk_wrap_invalid_arguments(arguments: str) -> dict[str, Any]:
    """``functionCall.args`` is a JSON object on the wire, but the model may have sampled anything.

    Arguments that do not parse to an object are handed over as ``{"_raw_arguments": "<text>"}``: the harness's
    schema check then reports the bad call to the model instead of the whole turn failing, and when the harness echoes
    the call back `quirk_unwrap_invalid_arguments` restores the exact sampled text.
    """
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {RAW_ARGUMENTS_KEY: arguments}
    return value if isinstance(value, dict) else {RAW_ARGUMENTS_KEY: arguments}


def quirk_unwrap_invalid_arguments(args: dict[str, Any]) -> str | None:
    """The sampled arguments text if ``args`` is the wrapper `quirk_wrap_invalid_arguments` made, else None."""
    raw = args.get(RAW_ARGUMENTS_KEY)
    return raw if len(args) == 1 and isinstance(raw, str) else None


def _thought_parts(completion: Completion) -> list[dict[str, Any]]:
    return [{"text": completion.reasoning, "thought": True}] if completion.reasoning else []


def _text_parts(completion: Completion) -> list[dict[str, Any]]:
    return [{"text": completion.text}] if completion.text else []


def _call_parts(completion: Completion) -> list[dict[str, Any]]:
    # Custom (freeform) calls need no special case: Google has no freeform tools, and their {"input": ...} wrapper
    # is already a valid args object.
    return [
        {"functionCall": {"id": call.id, "name": call.name, "args": quirk_wrap_invalid_arguments(call.arguments)}}
        for call in completion.tool_calls
    ]


def _chunk(request: ChatRequest, completion: Completion, parts: list[dict[str, Any]], *, final: bool) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
    if final:
        candidate["finishReason"] = _FINISH_REASONS[completion.finish_reason]
    candidate["index"] = 0
    body: dict[str, Any] = {"candidates": [candidate]}
    if final:
        body["usageMetadata"] = _usage_metadata(completion.usage)
    # Gemini echoes the model the caller named in the path; the upstream's own name means nothing to the harness.
    body["modelVersion"] = request.model
    body["responseId"] = completion.id
    return body


def _usage_metadata(usage: Usage) -> dict[str, int]:
    thoughts = min(usage.reasoning_tokens, usage.completion_tokens)
    meta = {
        "promptTokenCount": usage.prompt_tokens,
        "candidatesTokenCount": usage.completion_tokens - thoughts,
        "totalTokenCount": usage.total_tokens,
    }
    if thoughts:
        meta["thoughtsTokenCount"] = thoughts
    if usage.cached_tokens:
        meta["cachedContentTokenCount"] = usage.cached_tokens
    return meta
