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

from collections.abc import Mapping
from typing import Any, Literal

import orjson

from polar_cli.errors import RequestError
from polar_cli.translate import ir
from polar_cli.translate import openai_chat_checks as checks
from polar_cli.translate.codec import Codec, Route
from polar_cli.translate.openai_chat_encode import encode_error, encode_response, encode_stream

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
    if not isinstance(body, Mapping):
        raise checks.type_error("body", "a JSON object", body)
    model = checks.opt_str(body, "model", "") or route.model
    if not model:
        raise RequestError("model: required, a non-empty string")
    _refuse_unservable_outputs(body)
    tools = _decode_tools(body)
    stream = checks.opt_bool(body, "stream", "")
    stream = route.stream if route.stream is not None else bool(stream)
    stream_options = checks.opt_obj(body, "stream_options", "")
    include_usage = bool(stream_options and checks.opt_bool(stream_options, "include_usage", "stream_options"))
    return ir.ChatRequest(
        model=model,
        messages=_decode_messages(body),
        tools=tools,
        tool_choice=_decode_tool_choice(body, tools),
        parallel_tool_calls=checks.opt_bool(body, "parallel_tool_calls", ""),
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
        raise checks.type_error("messages", "an array of messages", raw)
    if not raw:
        raise RequestError("messages: must contain at least one message")
    messages: list[ir.Message] = []
    # The id of the latest legacy ``function_call``, which the next ``role: "function"`` message answers.
    open_legacy_call: str | None = None
    for i, item in enumerate(raw):
        path = f"messages[{i}]"
        msg = checks.obj(item, path)
        role = checks.req_str(msg, "role", path)
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
                    tool_call_id=checks.req_str(msg, "tool_call_id", path),
                    name=checks.opt_str(msg, "name", path),
                )
            )
        elif role == "function":
            call_id = open_legacy_call or _legacy_call_id(i)
            open_legacy_call = None
            content = _join_tool_text_parts(_content(msg, path, "tool"))
            messages.append(
                ir.Message(role="tool", content=content, tool_call_id=call_id, name=checks.req_str(msg, "name", path))
            )
        else:
            raise RequestError(f"{path}.role: unsupported role {role!r}")
    return tuple(messages)


def _decode_assistant(msg: Mapping[str, Any], path: str, index: int) -> ir.Message:
    calls = [
        _decode_tool_call(c, f"{path}.tool_calls[{k}]") for k, c in enumerate(checks.opt_list(msg, "tool_calls", path))
    ]
    legacy = checks.opt_obj(msg, "function_call", path)
    if legacy is not None:
        fpath = f"{path}.function_call"
        arguments = checks.opt_str(legacy, "arguments", fpath)
        calls.append(
            ir.ToolCall(
                id=_legacy_call_id(index),
                name=checks.req_str(legacy, "name", fpath),
                arguments="{}" if arguments is None else arguments,
            )
        )
    # vLLM and DeepSeek-style servers return the thinking as reasoning_content; newer vLLM as reasoning.
    reasoning = checks.opt_str(msg, "reasoning_content", path) or checks.opt_str(msg, "reasoning", path) or None
    return ir.Message(
        role="assistant", content=_content(msg, path, "assistant"), reasoning=reasoning, tool_calls=tuple(calls)
    )


def _decode_tool_call(item: Any, path: str) -> ir.ToolCall:
    call = checks.obj(item, path)
    call_id = checks.req_str(call, "id", path)
    call_type = checks.opt_str(call, "type", path) or "function"
    if call_type == "function":
        function = checks.req_obj(call, "function", path)
        fpath = f"{path}.function"
        arguments = checks.opt_str(function, "arguments", fpath)
        return ir.ToolCall(
            id=call_id,
            name=checks.req_str(function, "name", fpath),
            arguments="{}" if arguments is None else arguments,
        )
    if call_type == "custom":
        custom = checks.req_obj(call, "custom", path)
        cpath = f"{path}.custom"
        text = checks.opt_str(custom, "input", cpath) or ""
        return ir.ToolCall(
            id=call_id,
            name=checks.req_str(custom, "name", cpath),
            arguments=orjson.dumps({"input": text}).decode(),
            kind="custom",
        )
    raise RequestError(f"{path}.type: unsupported tool call type {call_type!r}")


def _content(msg: Mapping[str, Any], path: str, role: str) -> tuple[ir.Part, ...]:
    content = msg.get("content")
    cpath = f"{path}.content"
    if content is None or content == "":
        return ()
    if isinstance(content, str):
        return (ir.Text(content),)
    if not isinstance(content, list):
        raise checks.type_error(cpath, "a string, an array of content parts or null", content)
    return tuple(_decode_part(raw, f"{cpath}[{j}]", role) for j, raw in enumerate(content))


def _decode_part(raw: Any, path: str, role: str) -> ir.Part:
    part = checks.obj(raw, path)
    part_type = checks.req_str(part, "type", path)
    if part_type in _UNSERVABLE_PARTS:
        raise RequestError(f"{path}.type: {part_type!r} parts are not supported (text and image_url only)")
    if part_type not in _PART_TYPES[role]:
        raise RequestError(f"{path}.type: unsupported content part type {part_type!r} in a {role} message")
    if part_type == "image_url":
        image = checks.req_obj(part, "image_url", path)
        return ir.Image(url=checks.req_str(image, "url", f"{path}.image_url"))
    # "text" carries its text in "text", "refusal" in "refusal": the model's refusal is still its words.
    return ir.Text(checks.req_str(part, part_type, path))


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
    tools = [_decode_tool(t, f"tools[{i}]") for i, t in enumerate(checks.opt_list(body, "tools", ""))]
    # Deprecated ``functions``: the same definitions without the {type, function} wrapper.
    tools += [
        _decode_function(checks.obj(f, f"functions[{i}]"), f"functions[{i}]")
        for i, f in enumerate(checks.opt_list(body, "functions", ""))
    ]
    return tuple(tools)


def _decode_tool(item: Any, path: str) -> ir.Tool:
    tool = checks.obj(item, path)
    tool_type = checks.opt_str(tool, "type", path) or "function"
    if tool_type == "function":
        return _decode_function(checks.req_obj(tool, "function", path), f"{path}.function")
    if tool_type == "custom":
        custom = checks.req_obj(tool, "custom", path)
        cpath = f"{path}.custom"
        description = checks.opt_str(custom, "description", cpath) or ""
        return ir.Tool(
            name=_tool_name(custom, cpath),
            description=_custom_tool_description(
                description, checks.opt_obj(custom, "format", cpath), f"{cpath}.format"
            ),
            parameters=ir.custom_tool_parameters(),
            kind="custom",
        )
    raise RequestError(f"{path}.type: unsupported tool type {tool_type!r}")


def _decode_function(function: Mapping[str, Any], path: str) -> ir.Tool:
    parameters = checks.opt_obj(function, "parameters", path)
    checks.opt_bool(function, "strict", path)  # type-checked only: the upstream decodes unconstrained either way
    return ir.Tool(
        name=_tool_name(function, path),
        description=checks.opt_str(function, "description", path) or "",
        parameters=parameters if parameters is not None else {"type": "object", "properties": {}},
    )


def _tool_name(definition: Mapping[str, Any], path: str) -> str:
    name = checks.req_str(definition, "name", path)
    if not name:
        raise RequestError(f"{path}.name: must not be empty")
    return name


def _custom_tool_description(description: str, fmt: Mapping[str, Any] | None, path: str) -> str:
    # Upstream sees a plain function, so the grammar only reaches the model through the description.
    if fmt is None:
        return description
    fmt_type = checks.req_str(fmt, "type", path)
    if fmt_type == "text":
        return description
    if fmt_type != "grammar":
        raise RequestError(f"{path}.type: unsupported custom tool format {fmt_type!r}")
    grammar = checks.req_obj(fmt, "grammar", path)
    gpath = f"{path}.grammar"
    definition = checks.req_str(grammar, "definition", gpath)
    syntax = checks.opt_str(grammar, "syntax", gpath) or "lark"
    note = (
        f"Put the raw input (not JSON) in `input`; it must match this {syntax} grammar:\n"
        f"```{syntax}\n{definition.rstrip()}\n```"
    )
    return f"{description}\n\n{note}" if description else note


def _decode_tool_choice(body: Mapping[str, Any], tools: tuple[ir.Tool, ...]) -> ir.ToolChoice | None:
    key = "tool_choice" if body.get("tool_choice") is not None else "function_call"
    raw = body.get(key)
    if raw is None:
        return None
    if isinstance(raw, str):
        if raw not in _TOOL_CHOICE_MODES:
            raise RequestError(f"{key}: expected one of 'auto', 'none', 'required' or an object, got {raw!r}")
        return ir.ToolChoice(mode=_TOOL_CHOICE_MODES[raw])
    choice = checks.obj(raw, key)
    if key == "function_call":
        name, npath = checks.req_str(choice, "name", key), f"{key}.name"
    else:
        choice_type = checks.req_str(choice, "type", key)
        if choice_type not in ("function", "custom"):
            raise RequestError(f"{key}.type: unsupported tool_choice type {choice_type!r}")
        named = checks.req_obj(choice, choice_type, key)
        name, npath = checks.req_str(named, "name", f"{key}.{choice_type}"), f"{key}.{choice_type}.name"
    if not any(t.name == name for t in tools):
        raise RequestError(f"{npath}: no tool named {name!r} is offered")
    return ir.ToolChoice(mode="tool", name=name)


# ---------------------------------------------------------------------------------------------- generation settings


def _decode_sampling(body: Mapping[str, Any]) -> ir.Sampling:
    n = checks.opt_int(body, "n", "")
    if n is not None and n != 1:
        raise RequestError(f"n: only 1 choice per request is supported, got {n}")
    # max_completion_tokens replaced max_tokens; when both are sent the newer one wins.
    max_tokens = checks.opt_int(body, "max_completion_tokens", "")
    key = "max_completion_tokens"
    if max_tokens is None:
        max_tokens, key = checks.opt_int(body, "max_tokens", ""), "max_tokens"
    if max_tokens is not None and max_tokens < 1:
        raise RequestError(f"{key}: must be at least 1, got {max_tokens}")
    return ir.Sampling(
        max_tokens=max_tokens,
        temperature=checks.opt_float(body, "temperature"),
        top_p=checks.opt_float(body, "top_p"),
        top_k=checks.opt_int(body, "top_k", ""),
        min_p=checks.opt_float(body, "min_p"),
        presence_penalty=checks.opt_float(body, "presence_penalty"),
        frequency_penalty=checks.opt_float(body, "frequency_penalty"),
        seed=checks.opt_int(body, "seed", ""),
        stop=_decode_stop(body.get("stop")),
    )


def _decode_stop(raw: Any) -> tuple[str, ...]:
    if raw is None:
        return ()
    if isinstance(raw, str):
        return (raw,)
    if isinstance(raw, list) and all(isinstance(s, str) for s in raw):
        return tuple(raw)
    raise checks.type_error("stop", "a string or an array of strings", raw)


def _decode_reasoning(body: Mapping[str, Any]) -> ir.Reasoning | None:
    enabled: bool | None = None
    effort: str | None = None
    raw_effort = checks.opt_str(body, "reasoning_effort", "")
    if raw_effort == "none":
        enabled = False
    elif raw_effort is not None:
        if raw_effort not in _EFFORTS:
            raise RequestError(f"reasoning_effort: unsupported value {raw_effort!r}")
        enabled, effort = True, _EFFORTS[raw_effort]
    # Qwen-style servers (SGLang, vLLM, DashScope) switch thinking with enable_thinking, top level or template kwarg.
    kwargs = checks.opt_obj(body, "chat_template_kwargs", "") or {}
    for flag in (
        checks.opt_bool(body, "enable_thinking", ""),
        checks.opt_bool(kwargs, "enable_thinking", "chat_template_kwargs"),
    ):
        if flag is not None:
            enabled = flag
    if enabled is None and effort is None:
        return None
    return ir.Reasoning(enabled=enabled, effort=effort)


def _decode_response_format(body: Mapping[str, Any]) -> ir.ResponseFormat | None:
    raw = checks.opt_obj(body, "response_format", "")
    if raw is None:
        return None
    fmt_type = checks.req_str(raw, "type", "response_format")
    if fmt_type == "text":
        return None
    if fmt_type == "json_object":
        return ir.ResponseFormat(type="json_object")
    if fmt_type != "json_schema":
        raise RequestError(f"response_format.type: unsupported value {fmt_type!r}")
    spec = checks.req_obj(raw, "json_schema", "response_format")
    spath = "response_format.json_schema"
    name = checks.opt_str(spec, "name", spath) or "response"
    schema = checks.opt_obj(spec, "schema", spath)
    # A json_schema without a schema constrains nothing beyond "valid JSON".
    if schema is None:
        return ir.ResponseFormat(type="json_object", name=name)
    return ir.ResponseFormat(type="json_schema", schema=schema, name=name)


def _refuse_unservable_outputs(body: Mapping[str, Any]) -> None:
    modalities = checks.opt_list(body, "modalities", "")
    if "audio" in modalities:
        raise RequestError("modalities: audio output is not supported")
    if body.get("audio") is not None:
        raise RequestError("audio: audio output is not supported")


CODEC = Codec(
    name="openai_chat",
    decode_request=decode_request,
    encode_response=encode_response,
    encode_stream=encode_stream,
    encode_error=encode_error,
    tool_call_id_prefix="call_",
)
