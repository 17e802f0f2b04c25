"""The upstream side: IR -> the OpenAI Chat body sent to SGLang/vLLM, and their answer -> IR + captured tokens.

The upstream call is always non-streaming with token capture on (SGLang refuses its token-id options with
``stream: true``). How each server is asked for token ids is its `dialects.Dialect`; the fields the ids come back in
moved between releases (docs/upstream.md "Token fields"), so the answer is read through ordered fallbacks, and an
answer without token ids fails the call: Polar never records nothing silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import orjson

from polar_cli.errors import ContextLengthError, TokenCaptureError, UpstreamError
from polar_cli.token_ids import id_bytes
from polar_cli.translate.dialects import SGLANG, Dialect
from polar_cli.translate.ir import ChatRequest, FinishReason, Image, Message, Text, ToolCall, ToolKind, Usage
from polar_cli.translate.json_checks import load_object

ReasoningMode = Literal["reinject", "as-sent"]


@dataclass(frozen=True, slots=True)
class UpstreamOptions:
    # how this server is asked for token ids and whether it aborts by rid
    dialect: Dialect = SGLANG
    # the served model name; the harness's own model name (claude-..., gpt-...) is replaced by it
    model: str = "default"
    # merged into every call's chat_template_kwargs (e.g. {"enable_thinking": false})
    chat_template_kwargs: Mapping[str, Any] | None = None
    # overrides the harness's max tokens when it asks for more (Claude Code asks for 128000)
    max_tokens_cap: int | None = None
    # engine-specific fields added to every call (repetition_penalty, structured_outputs, logit_bias, ...); they never
    # replace what the harness asked for nor the token-capture fields
    extra_body: Mapping[str, Any] | None = None
    # reinject: assistant turns sent back without their reasoning get the reasoning they were sampled with
    # (gateway/reasoning.py); as-sent: the history goes to the server as the harness sent it
    reasoning: ReasoningMode = "reinject"
    # images by http(s) URL go upstream too (public hosts only: translate/images.py); off: data: URLs only
    remote_images: bool = False


@dataclass(frozen=True, slots=True)
class TokenCapture:
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float]
    finish_reason: str


@dataclass(frozen=True, slots=True)
class UpstreamAnswer:
    text: str
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason
    usage: Usage
    tokens: TokenCapture


def _content(message: Message) -> str | list[dict[str, Any]]:
    texts = [p.text for p in message.content if isinstance(p, Text)]
    if len(texts) == len(message.content):  # text only (as `message.text`, in one pass)
        return "".join(texts)
    parts: list[dict[str, Any]] = []
    for p in message.content:
        if isinstance(p, Image):
            parts.append({"type": "image_url", "image_url": {"url": p.url}})
        else:
            parts.append({"type": "text", "text": p.text})
    return parts


def _message(m: Message) -> dict[str, Any]:
    if m.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": _content(m) if m.content else None}
        if m.reasoning:
            out["reasoning_content"] = m.reasoning
        if m.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in m.tool_calls
            ]
        return out
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.text}
    return {"role": m.role, "content": _content(m)}


def chat_body(request: ChatRequest, options: UpstreamOptions, rid: str) -> dict[str, Any]:
    """The OpenAI Chat Completions body for the upstream, with the dialect's token-capture fields."""
    body: dict[str, Any] = {
        "model": options.model,
        "messages": [_message(m) for m in request.messages],
        "stream": False,
        "logprobs": True,
        **options.dialect.token_fields,
    }
    if request.tools:
        body["tools"] = [
            {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
            for t in request.tools
        ]
        if request.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = request.parallel_tool_calls
    choice = request.tool_choice
    if choice is not None and request.tools:
        body["tool_choice"] = (
            {"type": "function", "function": {"name": choice.name}} if choice.mode == "tool" else choice.mode
        )
    s = request.sampling
    max_tokens = s.max_tokens
    if options.max_tokens_cap is not None and (max_tokens is None or max_tokens > options.max_tokens_cap):
        max_tokens = options.max_tokens_cap
    body.update(replace(s, max_tokens=max_tokens).numbers())
    if s.stop:
        body["stop"] = list(s.stop)
    fmt = request.response_format
    if fmt is not None:
        body["response_format"] = (
            {"type": "json_schema", "json_schema": {"name": fmt.name, "schema": dict(fmt.schema)}}
            if fmt.type == "json_schema" and fmt.schema is not None
            else {"type": "json_object"}
        )
    kwargs = dict(options.chat_template_kwargs or {})
    if request.reasoning is not None and request.reasoning.enabled is not None:
        kwargs.setdefault("enable_thinking", request.reasoning.enabled)
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    if options.dialect.aborts:
        body["rid"] = rid
    if options.extra_body:
        for key, value in options.extra_body.items():
            body.setdefault(key, value)
    return body


# -- the answer ---------------------------------------------------------------------------------------------------


def _ints(value: Any) -> list[int] | None:
    """``value`` when it is a list of token ids (every element an int, bool excluded, in ``[0, 2**31)``), else None.

    Every element is checked, in C-speed passes: a float, null or string id would otherwise be recorded as trainable.
    The JSON text of a list holds nothing but digits and commas between its brackets exactly when every element
    encodes as a non-negative integer (a bool, float, null, string, minus sign or nested value puts another character
    there; an int subclass or an int past 64 bits does not encode); `token_ids.id_bytes` then says they are ints
    below 2**31 (an Enum, which encodes as its value, is not; an IntEnum, an int, is). A third of the time of a type
    pass, ``min`` and ``max`` (2,000 ids: ~25 us against ~80 us, on every call)."""
    if not isinstance(value, list):
        return None
    try:
        text = orjson.dumps(value, option=orjson.OPT_PASSTHROUGH_SUBCLASS)
    except orjson.JSONEncodeError:
        return None
    if text[1:-1].translate(None, b"0123456789,"):
        return None
    return value if id_bytes(value) is not None else None


def _first_ints(*candidates: Any) -> list[int] | None:
    for c in candidates:
        ids = _ints(c)
        if ids is not None:
            return ids
    return None


def _get(obj: Any, *path: str | int) -> Any:
    for key in path:
        if isinstance(key, int):
            if not isinstance(obj, list) or len(obj) <= key:
                return None
        elif not isinstance(obj, dict):
            return None
        obj = obj[key] if isinstance(key, int) else obj.get(key)
    return obj


def _number(value: Any, name: str) -> float:
    if type(value) not in (int, float):
        raise TokenCaptureError(f"upstream answer has a {type(value).__name__} {name}, not a number")
    return float(value)


def _numbers(values: list[Any], name: str) -> list[float]:
    """``values`` as floats when every one is a number (bool excluded), else `_number`'s error for the first that is
    not: the types checked in one C-speed pass, not one call per value."""
    if set(map(type, values)) <= {int, float}:
        return list(map(float, values))
    return [_number(v, name) for v in values]  # raises at the first value that is not a number


def _logprobs(choice: Mapping[str, Any], n: int) -> list[float]:
    content = _get(choice, "logprobs", "content")
    if isinstance(content, list) and len(content) == n:
        return _numbers([e.get("logprob") if isinstance(e, dict) else None for e in content], "logprob")
    meta = _get(choice, "meta_info", "output_token_logprobs")
    if isinstance(meta, list) and len(meta) == n:
        return _numbers([_get(e, 0) for e in meta], "logprob")
    got = len(content) if isinstance(content, list) else "no"
    raise TokenCaptureError(f"upstream answer has {got} logprobs for {n} sampled token ids")


def token_capture(body: Mapping[str, Any]) -> TokenCapture:
    """Prompt ids, sampled ids and their logprobs from an SGLang (any release) or vLLM chat answer.

    Order of preference follows docs/upstream.md "Token fields": per-choice fields of the current releases first,
    then the older and server-specific places.
    """
    choice = _get(body, "choices", 0)
    if not isinstance(choice, dict):
        raise TokenCaptureError("upstream answer has no choices[0]")
    meta_out = _get(choice, "meta_info", "output_token_logprobs")
    response_ids = _first_ints(
        choice.get("response_token_ids"),
        choice.get("token_ids"),
        _get(body, "sglext", "output_ids", 0),
        [_get(e, 1) for e in meta_out] if isinstance(meta_out, list) else None,
    )
    prompt_ids = _first_ints(
        choice.get("prompt_token_ids"), body.get("prompt_token_ids"), _get(body, "sglext", "input_ids")
    )
    if not response_ids or not prompt_ids:
        missing = " and ".join(n for n, v in (("prompt", prompt_ids), ("response", response_ids)) if not v)
        raise TokenCaptureError(
            f"upstream answer carries no {missing} token ids: is token capture supported by this server release? "
            "(SGLang >= 0.5.23: return_token_ids; vLLM: return_token_ids)"
        )
    finish = choice.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise TokenCaptureError(f"upstream answer has a {type(finish).__name__} finish_reason")
    return TokenCapture(prompt_ids, response_ids, _logprobs(choice, len(response_ids)), finish or "stop")


def _finish_reason(raw: str, has_tool_calls: bool) -> FinishReason:
    if has_tool_calls and raw in ("stop", "tool_calls"):
        return "tool_calls"
    if raw in ("length", "content_filter", "abort"):
        return raw  # type: ignore[return-value]
    return "stop"


def parse_answer(body: Mapping[str, Any], tools_by_name: Mapping[str, str]) -> UpstreamAnswer:
    """The upstream answer as IR parts plus its captured tokens. Tool-call ids are re-minted later by the gateway.

    ``tools_by_name`` maps each offered tool's name to its kind, so calls of freeform tools come back as ``custom``.
    A field of the wrong type (a null logprob, a string count, a tool call that is not an object) is the server's
    fault: an `UpstreamError` (502), recorded as such, never a crash of the call.
    """
    tokens = token_capture(body)
    message = _get(body, "choices", 0, "message")
    if not isinstance(message, dict):
        raise UpstreamError("upstream answer has no choices[0].message")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise UpstreamError("upstream answer's tool_calls is not a list")
    calls: list[ToolCall] = []
    for i, raw in enumerate(raw_calls):
        fn = raw.get("function") or {} if isinstance(raw, dict) else None
        if not isinstance(fn, dict):
            raise UpstreamError(f"upstream answer's tool_calls[{i}] is not a function call object")
        name = _text(fn.get("name"), f"tool_calls[{i}].function.name")
        args = fn.get("arguments")
        arguments = args if isinstance(args, str) else orjson.dumps(args if args is not None else {}).decode()
        kind: ToolKind = "custom" if tools_by_name.get(name) == "custom" else "function"
        call_id = _text(_get(raw, "id"), f"tool_calls[{i}].id") or f"call_{i}"
        calls.append(ToolCall(id=call_id, name=name, arguments=arguments, kind=kind))
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    usage = body.get("usage") or {}
    if not isinstance(usage, dict):
        raise UpstreamError(f"upstream answer's usage is a {type(usage).__name__}, not an object")
    return UpstreamAnswer(
        text=_text(message.get("content"), "content"),
        reasoning=_text(reasoning, "reasoning") or None,
        tool_calls=tuple(calls),
        finish_reason=_finish_reason(tokens.finish_reason, bool(calls)),
        usage=Usage(
            prompt_tokens=_count(usage.get("prompt_tokens"), "prompt_tokens") or len(tokens.prompt_ids),
            completion_tokens=_count(usage.get("completion_tokens"), "completion_tokens") or len(tokens.response_ids),
            reasoning_tokens=_count(_get(usage, "completion_tokens_details", "reasoning_tokens"), "reasoning_tokens"),
            cached_tokens=_count(_get(usage, "prompt_tokens_details", "cached_tokens"), "cached_tokens"),
        ),
        tokens=tokens,
    )


def _text(value: Any, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UpstreamError(f"upstream answer's {name} is a {type(value).__name__}, not a string")
    return value


def _count(value: Any, name: str) -> int:
    if value is None:
        return 0
    if type(value) is not int or value < 0:
        raise UpstreamError(f"upstream answer's usage {name} is {str(value)[:40]!r}, not a count")
    return value


_TOKEN_FIELDS = ("prompt_token_ids", "response_token_ids", "token_ids", "logprobs", "meta_info")


def strip_tokens(body: Mapping[str, Any]) -> dict[str, Any]:
    """The answer without its token arrays (they are stored once, compactly, in the capture record's own fields)."""
    out = {k: v for k, v in body.items() if k not in ("prompt_token_ids", "sglext")}
    choices = out.get("choices")
    if isinstance(choices, list):
        out["choices"] = [
            {k: v for k, v in c.items() if k not in _TOKEN_FIELDS} if isinstance(c, dict) else c for c in choices
        ]
    return out


_CONTEXT_MARKERS = (
    "context length",
    "context_length",
    "maximum context",
    "longer than the model",
    "too many tokens",
    "exceeds the max",
    "prompt is too long",
)


def upstream_error(status: int, body: bytes) -> UpstreamError:
    """The error for a non-200 upstream answer. Never a 429: Codex gives up on the first one, so overload is a 503."""
    message = _error_message(body)
    if status == 400 and any(m in message.lower() for m in _CONTEXT_MARKERS):
        return ContextLengthError(message)
    if status in (429, 503):
        return UpstreamError(f"upstream overloaded ({status}): {message}", status=503, kind="overloaded")
    if status in (408, 504):
        return UpstreamError(f"upstream timed out ({status}): {message}", status=504, kind="timeout")
    if status in (400, 422):  # the server refused what the harness asked for: the caller's fault, not transient
        return UpstreamError(f"upstream refused the request: {message}", status=400, kind="invalid_request")
    return UpstreamError(f"upstream failed ({status}): {message}", status=502)


def upstream_answer(status: int, body: bytes) -> dict[str, Any]:
    """The JSON object of an upstream answer: `upstream_error` for a status other than 200, UpstreamError for a body
    that is not a JSON object (a server's fault, never the caller's)."""
    if status != 200:
        raise upstream_error(status, body)
    return load_object(body, "upstream answer", UpstreamError)


def _error_message(body: bytes) -> str:
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:500].decode("utf-8", "replace").strip() or "no message"
    for path in (("message",), ("error", "message"), ("detail",), ("error",)):
        value = _get(data, *path)
        if isinstance(value, str):
            return value
    return str(data)[:500]


def tool_kinds(tools: Sequence[Any]) -> dict[str, str]:
    return {t.name: t.kind for t in tools}
