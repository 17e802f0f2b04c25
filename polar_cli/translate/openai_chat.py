"""OpenAI Chat Completions (``POST /v1/chat/completions``) <-> the IR.

Harnesses on this API: Qwen Code, opencode (``@ai-sdk/openai-compatible``) and Pi's ``openai-completions`` provider.
The IR follows OpenAI Chat's own model, so decoding is mostly checking JSON types and renaming; the encoders live in
`openai_chat_encode`.

Policy: unknown keys are ignored, because OpenAI-compatible servers accept vendor extras (Pi sends ``store``, others
``user`` or ``metadata``); a known key with the wrong JSON type, or a shape Polar cannot serve (audio, ``n > 1``), is a
`RequestError` whose message starts with the offending field's path.

Quirks, each a named function below:
- `_join_tool_text_parts`: Qwen Code sends a tool result as a list of text parts instead of a string.
- `_legacy_call_id`: the deprecated ``function_call`` / ``role: "function"`` pair carries no ids, so ids are minted.
- ``developer`` is read as ``system`` (Pi sends it for reasoning models; the upstream chat template knows ``system``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from polar_cli.errors import RequestError
from polar_cli.translate import ir
from polar_cli.translate import json_checks as check
from polar_cli.translate.codec import Codec, Route
from polar_cli.translate.openai_chat_encode import encode_error, encode_response, encode_stream
from polar_cli.translate.openai_responses_tools import custom_tool_description

# The codec and what the Responses module builds on.
__all__ = ["CODEC", "decode_request", "encode_error", "encode_response", "encode_stream", "sampling_fields"]

# Content part types each role may carry; anything else is refused with the role named.
_PART_TYPES: Mapping[str, frozenset[str]] = {
    "system": frozenset({"text"}),
    "user": frozenset({"text", "image_url"}),
    "assistant": frozenset({"text", "refusal"}),
    "tool": frozenset({"text"}),
}
# Real OpenAI part types that the upstream (a text/image chat template) cannot take.
_UNSERVABLE_PARTS = frozenset({"input_audio", "file"})
_TOOL_CHOICE_MODES: Mapping[str, Literal["auto", "none", "required"]] = {
    "auto": "auto",
    "none": "none",
    "required": "required",
}
# "xhigh" is newer than the IR's vocabulary (minimal/low/medium/high): read as the highest the IR knows.
_EFFORTS: Mapping[str, str] = {
    "minimal": "minimal",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
}


def decode_request(body: ir.JsonObject, route: Route) -> ir.ChatRequest:
    """Decode a Chat Completions request body into the IR.

    Raises `RequestError` (400) naming the field for wrong JSON types, missing required fields and shapes the upstream
    cannot serve. Never raises anything else, whatever JSON it is given.
    """
    body = check.request_body(body)
    model = check.opt_str(body.get("model"), "model") or route.model
    if not model:
        raise RequestError("model: required, a non-empty string")
    _refuse_unservable_outputs(body)
    tools = _decode_tools(body)
    stream = check.opt_bool(body.get("stream"), "stream")
    stream = route.stream if route.stream is not None else bool(stream)
    stream_options = check.opt_obj(body.get("stream_options"), "stream_options")
    include_usage = bool(
        stream_options and check.opt_bool(stream_options.get("include_usage"), "stream_options.include_usage")
    )
    return ir.ChatRequest(
        model=model,
        messages=_decode_messages(body),
        tools=tools,
        tool_choice=_decode_tool_choice(body, tools),
        parallel_tool_calls=check.opt_bool(body.get("parallel_tool_calls"), "parallel_tool_calls"),
        sampling=_decode_sampling(body),
        reasoning=_decode_reasoning(body),
        response_format=_decode_response_format(body),
        stream=stream,
        include_usage=stream and include_usage,
    )


# ---------------------------------------------------------------------------------------------------------- messages


def _decode_messages(body: Mapping[str, Any]) -> tuple[ir.Message, ...]:
    raw = body.get("messages")
    if not isinstance(raw, list):
        check.fail("messages", f"expected an array of messages, got {check.json_type(raw)}")
    if not raw:
        raise RequestError("messages: must contain at least one message")
    messages: list[ir.Message] = []
    # The id of the latest legacy ``function_call``, which the next ``role: "function"`` message answers.
    open_legacy_call: str | None = None
    for i, item in enumerate(raw):
        path = f"messages[{i}]"
        msg = check.obj(item, path)
        role = check.string(msg.get("role"), f"{path}.role")
        if role in ("system", "developer"):
            messages.append(ir.Message(role="system", content=_content(msg, path, "system")))
        elif role == "user":
            messages.append(ir.Message(role="user", content=_content(msg, path, "user")))
        elif role == "assistant":
            messages.append(_decode_assistant(msg, path, i))
            if msg.get("function_call") is not None:
                open_legacy_call = _legacy_call_id(i)
        elif role == "tool":
            messages.append(
                ir.Message(
                    role="tool",
                    content=_join_tool_text_parts(_content(msg, path, "tool")),
                    tool_call_id=check.string(msg.get("tool_call_id"), f"{path}.tool_call_id"),
                    name=check.opt_str(msg.get("name"), f"{path}.name"),
                )
            )
        elif role == "function":
            call_id = open_legacy_call or _legacy_call_id(i)
            open_legacy_call = None
            content = _join_tool_text_parts(_content(msg, path, "tool"))
            name = check.string(msg.get("name"), f"{path}.name")
            messages.append(ir.Message(role="tool", content=content, tool_call_id=call_id, name=name))
        else:
            raise RequestError(f"{path}.role: unsupported role {role!r}")
    return tuple(messages)


def _decode_assistant(msg: Mapping[str, Any], path: str, index: int) -> ir.Message:
    raw_calls = check.opt_array(msg.get("tool_calls"), f"{path}.tool_calls") or ()
    calls = [_decode_tool_call(c, f"{path}.tool_calls[{k}]") for k, c in enumerate(raw_calls)]
    legacy = msg.get("function_call")
    if legacy is not None:
        calls.append(_decode_function(_legacy_call_id(index), legacy, f"{path}.function_call"))
    # vLLM and DeepSeek-style servers return the thinking as reasoning_content; newer vLLM as reasoning.
    reasoning = (
        check.opt_str(msg.get("reasoning_content"), f"{path}.reasoning_content")
        or check.opt_str(msg.get("reasoning"), f"{path}.reasoning")
        or None
    )
    return ir.Message(
        role="assistant", content=_content(msg, path, "assistant"), reasoning=reasoning, tool_calls=tuple(calls)
    )


def _decode_tool_call(item: Any, path: str) -> ir.ToolCall:
    call = check.obj(item, path)
    call_id = check.string(call.get("id"), f"{path}.id")
    call_type = check.opt_str(call.get("type"), f"{path}.type") or "function"
    if call_type == "function":
        return _decode_function(call_id, call.get("function"), f"{path}.function")
    if call_type == "custom":
        cpath = f"{path}.custom"
        custom = check.obj(call.get("custom"), cpath)
        text = check.opt_str(custom.get("input"), f"{cpath}.input") or ""
        return ir.ToolCall(
            id=call_id,
            name=check.string(custom.get("name"), f"{cpath}.name"),
            arguments=check.json_text({"input": text}, f"{cpath}.input"),
            kind="custom",
        )
    raise RequestError(f"{path}.type: unsupported tool call type {call_type!r}")


def _decode_function(call_id: str, raw: Any, path: str) -> ir.ToolCall:
    """A ``function`` call object (``{name, arguments}``), also the shape of the deprecated ``function_call``."""
    function = check.obj(raw, path)
    arguments = check.opt_str(function.get("arguments"), f"{path}.arguments")
    return ir.ToolCall(
        id=call_id,
        name=check.string(function.get("name"), f"{path}.name"),
        arguments="{}" if arguments is None else arguments,
    )


def _content(msg: Mapping[str, Any], path: str, role: str) -> tuple[ir.Part, ...]:
    content = msg.get("content")
    cpath = f"{path}.content"
    if content is None or content == "":
        return ()
    if isinstance(content, str):
        return (ir.Text(content),)
    if not isinstance(content, list):
        check.fail(cpath, f"expected a string, an array of content parts or null, got {check.json_type(content)}")
    return tuple([_decode_part(raw, f"{cpath}[{j}]", role) for j, raw in enumerate(content)])


def _decode_part(raw: Any, path: str, role: str) -> ir.Part:
    part = check.obj(raw, path)
    part_type = check.string(part.get("type"), f"{path}.type")
    if part_type in _UNSERVABLE_PARTS:
        raise RequestError(f"{path}.type: {part_type!r} parts are not supported (text and image_url only)")
    if part_type not in _PART_TYPES[role]:
        raise RequestError(f"{path}.type: unsupported content part type {part_type!r} in a {role} message")
    if part_type == "image_url":
        image = check.obj(part.get("image_url"), f"{path}.image_url")
        return ir.Image(url=check.string(image.get("url"), f"{path}.image_url.url"))
    # "text" carries its text in "text", "refusal" in "refusal": the model's refusal is still its words.
    return ir.Text(check.string(part.get(part_type), f"{path}.{part_type}"))


def _join_tool_text_parts(parts: tuple[ir.Part, ...]) -> tuple[ir.Part, ...]:
    """Qwen Code sends tool results as a list of text parts; chat templates expect one string (joined as vLLM does)."""
    if len(parts) <= 1:
        return parts
    return (ir.Text("\n".join(p.text for p in parts if isinstance(p, ir.Text))),)


def _legacy_call_id(message_index: int) -> str:
    """The deprecated ``function_call`` has no id: mint a stable one from the assistant message's position."""
    return f"call_legacy_{message_index}"


# ------------------------------------------------------------------------------------------------------------- tools


def _decode_tools(body: Mapping[str, Any]) -> tuple[ir.Tool, ...]:
    tools = [_decode_tool(t, f"tools[{i}]") for i, t in enumerate(check.opt_array(body.get("tools"), "tools") or ())]
    # Deprecated ``functions``: the same definitions without the {type, function} wrapper.
    functions = check.opt_array(body.get("functions"), "functions") or ()
    tools += [_decode_function_tool(f, f"functions[{i}]") for i, f in enumerate(functions)]
    return tuple(tools)


def _decode_tool(item: Any, path: str) -> ir.Tool:
    tool = check.obj(item, path)
    tool_type = check.opt_str(tool.get("type"), f"{path}.type") or "function"
    if tool_type == "function":
        return _decode_function_tool(tool.get("function"), f"{path}.function")
    if tool_type == "custom":
        cpath = f"{path}.custom"
        custom = check.obj(tool.get("custom"), cpath)
        description = check.opt_str(custom.get("description"), f"{cpath}.description") or ""
        return ir.Tool(
            name=_tool_name(custom, cpath),
            description=_custom_tool_description(description, custom.get("format"), f"{cpath}.format"),
            parameters=ir.custom_tool_parameters(),
            kind="custom",
        )
    raise RequestError(f"{path}.type: unsupported tool type {tool_type!r}")


def _decode_function_tool(raw: Any, path: str) -> ir.Tool:
    function = check.obj(raw, path)
    parameters = check.opt_obj(function.get("parameters"), f"{path}.parameters")
    # type-checked only: the upstream decodes unconstrained either way
    check.opt_bool(function.get("strict"), f"{path}.strict")
    return ir.Tool(
        name=_tool_name(function, path),
        description=check.opt_str(function.get("description"), f"{path}.description") or "",
        parameters=parameters if parameters is not None else {"type": "object", "properties": {}},
    )


def _tool_name(definition: Mapping[str, Any], path: str) -> str:
    name = check.string(definition.get("name"), f"{path}.name")
    if not name:
        raise RequestError(f"{path}.name: must not be empty")
    return name


def _custom_tool_description(description: str, raw_format: Any, path: str) -> str:
    """Chat nests a custom tool's grammar one level deeper than Responses: ``format.grammar.{syntax, definition}``."""
    return custom_tool_description(description, check.opt_obj(raw_format, path), path, grammar_key="grammar")


def _decode_tool_choice(body: Mapping[str, Any], tools: tuple[ir.Tool, ...]) -> ir.ToolChoice | None:
    key = "tool_choice" if body.get("tool_choice") is not None else "function_call"
    raw = body.get(key)
    if raw is None:
        return None
    if isinstance(raw, str):
        if raw not in _TOOL_CHOICE_MODES:
            raise RequestError(f"{key}: expected one of 'auto', 'none', 'required' or an object, got {raw!r}")
        return ir.ToolChoice(mode=_TOOL_CHOICE_MODES[raw])
    choice = check.obj(raw, key)
    if key == "function_call":
        npath = f"{key}.name"
        name = check.string(choice.get("name"), npath)
    else:
        choice_type = check.string(choice.get("type"), f"{key}.type")
        if choice_type not in ("function", "custom"):
            raise RequestError(f"{key}.type: unsupported tool_choice type {choice_type!r}")
        named = check.obj(choice.get(choice_type), f"{key}.{choice_type}")
        npath = f"{key}.{choice_type}.name"
        name = check.string(named.get("name"), npath)
    if not any(t.name == name for t in tools):
        raise RequestError(f"{npath}: no tool named {name!r} is offered")
    return ir.ToolChoice(mode="tool", name=name)


# ---------------------------------------------------------------------------------------------- generation settings


def _decode_sampling(body: Mapping[str, Any]) -> ir.Sampling:
    n = check.opt_int(body.get("n"), "n")
    if n is not None and n != 1:
        raise RequestError(f"n: only 1 choice per request is supported, got {n}")
    # max_completion_tokens replaced max_tokens; when both are sent the newer one wins.
    key = "max_completion_tokens"
    max_tokens = check.opt_int(body.get(key), key)
    if max_tokens is None:
        key = "max_tokens"
        max_tokens = check.opt_int(body.get(key), key)
    if max_tokens is not None and max_tokens < 1:
        raise RequestError(f"{key}: must be at least 1, got {max_tokens}")
    return ir.Sampling(max_tokens=max_tokens, **sampling_fields(body), stop=_decode_stop(body.get("stop")))


# the sampling fields an OpenAI body sends under the IR's own names (Chat's), each with the check of its JSON type
SAMPLING_FIELDS: dict[str, Callable[[Any, str], float | None]] = {
    "temperature": check.opt_float,
    "top_p": check.opt_float,
    "top_k": check.opt_int,
    "min_p": check.opt_float,
    "presence_penalty": check.opt_float,
    "frequency_penalty": check.opt_float,
    "seed": check.opt_int,
}


def sampling_fields(body: Mapping[str, Any], names: Iterable[str] = SAMPLING_FIELDS) -> dict[str, Any]:
    """The sampling fields ``names`` of a Chat or Responses body, type-checked, as `ir.Sampling` keyword arguments."""
    return {name: SAMPLING_FIELDS[name](body.get(name), name) for name in names}


def _decode_stop(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        return (raw,)
    if isinstance(raw, list) and all(isinstance(s, str) for s in raw):
        return tuple(raw)
    check.fail("stop", f"expected a string or an array of strings, got {check.json_type(raw)}")


def _decode_reasoning(body: Mapping[str, Any]) -> ir.Reasoning | None:
    enabled: bool | None = None
    effort: str | None = None
    raw_effort = check.opt_str(body.get("reasoning_effort"), "reasoning_effort")
    if raw_effort == "none":
        enabled = False
    elif raw_effort is not None:
        if raw_effort not in _EFFORTS:
            raise RequestError(f"reasoning_effort: unsupported value {raw_effort!r}")
        enabled, effort = True, _EFFORTS[raw_effort]
    # Qwen-style servers (SGLang, vLLM, DashScope) switch thinking with enable_thinking, top level or template kwarg.
    kwargs = check.opt_obj(body.get("chat_template_kwargs"), "chat_template_kwargs") or {}
    for flag in (
        check.opt_bool(body.get("enable_thinking"), "enable_thinking"),
        check.opt_bool(kwargs.get("enable_thinking"), "chat_template_kwargs.enable_thinking"),
    ):
        if flag is not None:
            enabled = flag
    if enabled is None and effort is None:
        return None
    return ir.Reasoning(enabled=enabled, effort=effort)


def _decode_response_format(body: Mapping[str, Any]) -> ir.ResponseFormat | None:
    raw = check.opt_obj(body.get("response_format"), "response_format")
    if raw is None:
        return None
    fmt_type = check.string(raw.get("type"), "response_format.type")
    if fmt_type == "text":
        return None
    if fmt_type == "json_object":
        return ir.ResponseFormat(type="json_object")
    if fmt_type != "json_schema":
        raise RequestError(f"response_format.type: unsupported value {fmt_type!r}")
    spath = "response_format.json_schema"
    spec = check.obj(raw.get("json_schema"), spath)
    name = check.opt_str(spec.get("name"), f"{spath}.name") or "response"
    schema = check.opt_obj(spec.get("schema"), f"{spath}.schema")
    # A json_schema without a schema constrains nothing beyond "valid JSON".
    if schema is None:
        return ir.ResponseFormat(type="json_object", name=name)
    return ir.ResponseFormat(type="json_schema", schema=schema, name=name)


def _refuse_unservable_outputs(body: Mapping[str, Any]) -> None:
    modalities = check.opt_array(body.get("modalities"), "modalities")
    if modalities and "audio" in modalities:
        raise RequestError("modalities: audio output is not supported")
    if body.get("audio") is not None:
        raise RequestError("audio: audio output is not supported")


CODEC = Codec("openai_chat", decode_request, encode_response, encode_stream, encode_error)
