"""OpenAI Responses API (``POST /v1/responses``) <-> the IR. Spoken by Codex CLI (its only wire API) and Pi.

Mental model: a Responses request is a flat list of *items* (messages, function calls, their outputs, reasoning),
while the IR is a Chat-style list of turns. Decoding folds the items into turns:

    Rule 1: consecutive assistant output items (``message`` with role assistant, ``function_call``,
            ``custom_tool_call``) become ONE assistant turn carrying text and several tool calls.
    Rule 2: a ``reasoning`` item belongs to the assistant output that follows it; one that arrives after that turn
            already has output starts the next turn. Reasoning that no assistant output follows is dropped.
    Rule 3: every ``*_call_output`` item is its own ``tool`` turn.

The gateway is stateless (Codex sends ``store: false`` and the full history every turn), so anything that points at
server-side state (``previous_response_id``, ``item_reference``, ``conversation``) is refused with a 400.
Tools (functions, freeform tools, namespace groups flattened, hosted tools hidden) are decoded in
`openai_responses_tools`; the encode side (Response object, SSE stream, errors) lives in `openai_responses_encode`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polar_cli.errors import ErrorKind, RequestError
from polar_cli.translate import ir
from polar_cli.translate import json_checks as check
from polar_cli.translate.codec import Codec, Route
from polar_cli.translate.openai_chat import sampling_fields
from polar_cli.translate.openai_responses_encode import (
    encode_error,
    encode_failed_stream,
    encode_response,
    encode_stream,
)
from polar_cli.translate.openai_responses_tools import (
    FlatNames,
    call_name,
    custom_tool_description,
    decode_tool_choice,
    decode_tools,
    drop_hosted_tools,
    flat_names,
)

__all__ = [
    "CODEC",
    "custom_tool_description",
    "decode_request",
    "drop_hosted_tools",
    "encode_error",
    "encode_response",
    "encode_stream",
]

_EFFORT_OFF = "none"


def decode_request(body: ir.JsonObject, route: Route) -> ir.ChatRequest:
    """Decode a Responses request body into the IR; raise RequestError naming the field for anything malformed."""
    body = check.request_body(body)
    _reject_stateful_fields(body)
    model = route.model if route.model is not None else check.string(body.get("model"), "model")
    tools = decode_tools(body.get("tools"))
    names = flat_names(tools)
    messages: list[ir.Message] = []
    instructions = check.opt_str(body.get("instructions"), "instructions")
    if instructions:
        messages.append(ir.Message(role="system", content=(ir.Text(instructions),)))
    messages.extend(_decode_input(body.get("input"), names))
    stream = check.opt_bool(body.get("stream"), "stream")
    return ir.ChatRequest(
        model=model,
        messages=tuple(messages),
        tools=tools,
        tool_choice=decode_tool_choice(body.get("tool_choice"), names),
        parallel_tool_calls=check.opt_bool(body.get("parallel_tool_calls"), "parallel_tool_calls"),
        sampling=_decode_sampling(body),
        reasoning=_decode_reasoning(body.get("reasoning")),
        response_format=_decode_text_format(body.get("text")),
        stream=route.stream if route.stream is not None else bool(stream),
    )


def _reject_stateful_fields(body: Mapping[str, Any]) -> None:
    for name in ("previous_response_id", "conversation", "prompt"):
        if body.get(name) is not None:
            raise RequestError(
                f"{name}: not supported: this gateway stores no responses; "
                "send the whole conversation in `input` (store: false)"
            )
    if body.get("background") is True:
        raise RequestError("background: not supported: this gateway answers synchronously")


# --- input items -----------------------------------------------------------------------------------------------


def _decode_input(raw: Any, names: FlatNames) -> list[ir.Message]:
    if isinstance(raw, str):
        return [ir.Message(role="user", content=(ir.Text(raw),))]
    items = check.array(raw, "input")
    out: list[ir.Message] = []
    reasoning: list[str] = []
    parts: list[ir.Part] = []
    calls: list[ir.ToolCall] = []
    call_names: dict[str, str] = {}

    def flush() -> None:
        if parts or calls:
            out.append(
                ir.Message(
                    role="assistant",
                    content=tuple(parts),
                    reasoning="\n\n".join(reasoning) if reasoning else None,
                    tool_calls=tuple(calls),
                )
            )
            reasoning.clear()
            parts.clear()
            calls.clear()

    for index, raw_item in enumerate(items):
        path = f"input[{index}]"
        item = check.obj(raw_item, path)
        kind = _item_type(item, path)
        if kind == "reasoning":
            flush()  # Rule 2: reasoning opens the next assistant turn
            text = _reasoning_text(item, path)
            if text:
                reasoning.append(text)
        elif kind == "message" and check.string(item.get("role"), f"{path}.role") == "assistant":
            parts.extend(_decode_content(item.get("content"), f"{path}.content"))
        elif kind == "function_call":
            call = _decode_function_call(item, path, names)
            call_names[call.id] = call.name
            calls.append(call)
        elif kind == "custom_tool_call":
            call = _decode_custom_tool_call(item, path, names)
            call_names[call.id] = call.name
            calls.append(call)
        else:
            flush()
            reasoning.clear()  # Rule 2: nothing to attach it to
            if kind == "message":
                out.append(_decode_message(item, path))
            elif kind in ("function_call_output", "custom_tool_call_output"):
                call_id = check.string(item.get("call_id"), f"{path}.call_id")
                content = _decode_content(item.get("output"), f"{path}.output")
                out.append(ir.Message(role="tool", content=content, tool_call_id=call_id, name=call_names.get(call_id)))
            elif kind == "item_reference":
                raise RequestError(
                    f"{path}: item_reference is not supported: this gateway stores no items; send the item itself"
                )
            else:
                raise RequestError(f"{path}.type: unsupported input item type {kind!r}")
    flush()
    return out


def _item_type(item: Mapping[str, Any], path: str) -> str:
    # EasyInputMessage (Pi's system prompt) carries no "type": a bare {role, content} is a message.
    raw = item.get("type")
    if raw is None and "role" in item:
        return "message"
    return check.string(raw, f"{path}.type")


def _decode_message(item: Mapping[str, Any], path: str) -> ir.Message:
    role = check.string(item.get("role"), f"{path}.role")
    content = _decode_content(item.get("content"), f"{path}.content")
    if role == "user":
        return ir.Message(role="user", content=content)
    if role in ("system", "developer"):
        return ir.Message(role="system", content=content)
    raise RequestError(f"{path}.role: unsupported role {role!r}")


def _decode_content(raw: Any, path: str) -> tuple[ir.Part, ...]:
    if isinstance(raw, str):
        return (ir.Text(raw),)
    if not isinstance(raw, list):
        raise RequestError(f"{path}: expected a string or an array, got {check.json_type(raw)}")
    return tuple([_decode_part(part, f"{path}[{i}]") for i, part in enumerate(raw)])


def _decode_part(raw: Any, path: str) -> ir.Part:
    part = check.obj(raw, path)
    kind = check.string(part.get("type"), f"{path}.type")
    if kind in ("input_text", "output_text"):
        return ir.Text(check.string(part.get("text"), f"{path}.text"))
    if kind == "refusal":
        return ir.Text(check.string(part.get("refusal"), f"{path}.refusal"))
    if kind == "input_image":
        url = check.opt_str(part.get("image_url"), f"{path}.image_url")
        if url is None:
            raise RequestError(f"{path}.image_url: required (file_id images are not supported)")
        return ir.Image(url)
    raise RequestError(f"{path}.type: unsupported content part type {kind!r}")


def _decode_function_call(item: Mapping[str, Any], path: str, names: FlatNames) -> ir.ToolCall:
    return ir.ToolCall(
        id=check.string(item.get("call_id"), f"{path}.call_id"),
        name=_call_name(item, path, names),
        arguments=check.string(item.get("arguments"), f"{path}.arguments"),
    )


def _decode_custom_tool_call(item: Mapping[str, Any], path: str, names: FlatNames) -> ir.ToolCall:
    input_path = f"{path}.input"
    arguments = check.json_text({"input": check.string(item.get("input"), input_path)}, input_path)
    return ir.ToolCall(
        id=check.string(item.get("call_id"), f"{path}.call_id"),
        name=_call_name(item, path, names),
        arguments=arguments,
        kind="custom",
    )


def _call_name(item: Mapping[str, Any], path: str, names: FlatNames) -> str:
    # A call Codex echoes from a namespace carries ``namespace`` beside the inner name: the upstream saw the flat one.
    name = check.string(item.get("name"), f"{path}.name")
    return call_name(name, check.opt_str(item.get("namespace"), f"{path}.namespace"), names)


def _reasoning_text(item: Mapping[str, Any], path: str) -> str:
    # Full reasoning text (``content``) wins over the summary; ``encrypted_content`` is opaque and ignored.
    content = item.get("content")
    if content is not None:
        texts = [
            check.string(check.obj(p, f"{path}.content[{i}]").get("text"), f"{path}.content[{i}].text")
            for i, p in enumerate(check.array(content, f"{path}.content"))
        ]
        if texts:
            return "".join(texts)
    summary = item.get("summary")
    if summary is None:
        return ""
    return "\n\n".join(
        check.string(check.obj(p, f"{path}.summary[{i}]").get("text"), f"{path}.summary[{i}].text")
        for i, p in enumerate(check.array(summary, f"{path}.summary"))
    )


# --- generation settings ---------------------------------------------------------------------------------------


# Chat's sampling fields but min_p, which the Responses decoder does not read
_SAMPLING = ("temperature", "top_p", "top_k", "presence_penalty", "frequency_penalty", "seed")


def _decode_sampling(body: Mapping[str, Any]) -> ir.Sampling:
    max_tokens = None
    # Responses says max_output_tokens; Chat-style names are accepted so a mis-pointed client is not ignored.
    for name in ("max_output_tokens", "max_completion_tokens", "max_tokens"):
        max_tokens = check.opt_int(body.get(name), name)
        if max_tokens is not None:
            break
    return ir.Sampling(max_tokens=max_tokens, **sampling_fields(body, _SAMPLING))


def _decode_reasoning(raw: Any) -> ir.Reasoning | None:
    if raw is None:
        return None
    settings = check.obj(raw, "reasoning")
    effort = check.opt_str(settings.get("effort"), "reasoning.effort")
    check.opt_str(settings.get("summary"), "reasoning.summary")  # we always return the whole reasoning as the summary
    if effort is None:
        return None
    if effort == _EFFORT_OFF:
        return ir.Reasoning(enabled=False)
    return ir.Reasoning(enabled=True, effort=effort)


def _decode_text_format(raw: Any) -> ir.ResponseFormat | None:
    if raw is None:
        return None
    fmt_raw = check.obj(raw, "text").get("format")  # ``verbosity`` has no upstream equivalent
    if fmt_raw is None:
        return None
    fmt = check.obj(fmt_raw, "text.format")
    kind = check.string(fmt.get("type"), "text.format.type")
    if kind == "text":
        return None
    if kind == "json_object":
        return ir.ResponseFormat(type="json_object")
    if kind == "json_schema":
        schema = dict(check.obj(fmt.get("schema"), "text.format.schema"))
        name = check.opt_str(fmt.get("name"), "text.format.name") or "response"
        return ir.ResponseFormat(type="json_schema", schema=schema, name=name)
    raise RequestError(f"text.format.type: unsupported format {kind!r}")


def _encode_stream_error(
    request: ir.ChatRequest, completion_id: str, created: int, kind: ErrorKind, message: str
) -> list[bytes]:
    return encode_failed_stream(request, completion_id=completion_id, created=created, kind=kind, message=message)


CODEC = Codec(
    "openai_responses",
    decode_request,
    encode_response,
    encode_stream,
    encode_error,
    encode_stream_error=_encode_stream_error,
    stream_error_kinds=frozenset({"context_length"}),
)
