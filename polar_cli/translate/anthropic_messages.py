"""Anthropic Messages API (``POST /v1/messages``), as Claude Code and Pi's ``anthropic-messages`` provider send it.

Mental model: an Anthropic conversation is a list of user/assistant turns whose content is a list of typed blocks.
The IR follows OpenAI Chat, so decoding reshapes blocks into messages:

- top-level ``system`` (string or text blocks) becomes the first ``system`` message;
- an assistant turn's ``thinking`` blocks become its ``reasoning``, its ``tool_use`` blocks its ``tool_calls``;
- each ``tool_result`` block of a user turn becomes its own ``tool`` message, placed before the rest of that user
  turn, because OpenAI Chat wants tool results right after the assistant turn that called the tools.

Encoding (the Message object, the SSE stream, the error body) lives in `anthropic_messages_encode`.
Harness quirks are the ``_quirk_*`` functions below.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, Literal, NoReturn

import orjson

from polar_cli.errors import RequestError
from polar_cli.translate import json_checks as check
from polar_cli.translate.anthropic_messages_encode import encode_error, encode_response, encode_stream
from polar_cli.translate.codec import Codec, Route
from polar_cli.translate.ir import (
    ChatRequest,
    Image,
    JsonObject,
    Message,
    Part,
    Reasoning,
    ResponseFormat,
    Sampling,
    Text,
    Tool,
    ToolCall,
    ToolChoice,
)

__all__ = ["CODEC", "decode_request", "encode_error", "encode_response", "encode_stream"]

BILLING_HEADER_PREFIX = "x-anthropic-billing-header:"

# Anthropic's effort levels in OpenAI's words (the IR's vocabulary); OpenAI has nothing above "high".
_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
_TOOL_CHOICE_MODES: dict[str, Literal["auto", "none", "required", "tool"]] = {
    "auto": "auto",
    "any": "required",
    "none": "none",
    "tool": "tool",
}
# json.dumps's default separators (", " and ": ") match what the upstream's tool parsers emit, so an echoed call
# renders the way the model's own call was recorded. One encoder for all calls: json.dumps builds a new one each time
# it is given options.
_TOOL_INPUT_ENCODER = json.JSONEncoder(ensure_ascii=False)
# The C encoder that `_TOOL_INPUT_ENCODER.encode` builds for every object it is given, built once: the same text at a
# third of the cost (a long history echoes dozens of calls). No circular-reference check (``markers`` None): a parsed
# JSON body cannot hold a cycle, and a cycle still ends in a RecursionError. None where Python lacks the C encoder.
_TOOL_INPUT_C_ENCODER = (
    c_make_encoder(None, _TOOL_INPUT_ENCODER.default, encode_basestring, None, ": ", ", ", False, False, True)
    if c_make_encoder is not None
    else None
)
# Anthropic-defined tools are dated (web_search_20250305, tool_search_tool_regex_20251119); mcp_toolset is undated.
_SERVER_TOOL_TYPE = re.compile(r"[a-z][a-z0-9_]*_20\d{6}")


def decode_request(body: JsonObject, route: Route) -> ChatRequest:
    """Decode a Messages API request body into the IR.

    Raises `RequestError` naming the offending field (``messages[3].content[0].type: ...``) for anything malformed or
    unsupported. Ignored on purpose: ``metadata``, ``context_management``, ``cache_control``, ``citations``,
    ``thinking.display``, tool flags such as ``defer_loading``/``eager_input_streaming``, and thinking signatures.
    """
    body = check.request_body(body)
    model = route.model or check.string(body.get("model"), "model")
    messages = [*_system_prompt(body.get("system")), *_messages(check.array(body.get("messages"), "messages"))]
    tool_choice, parallel = _tool_choice(body.get("tool_choice"))
    output_config = check.opt_obj(body.get("output_config"), "output_config") or {}
    return ChatRequest(
        model=model,
        messages=tuple(messages),
        tools=_tools(body.get("tools")),
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        sampling=_sampling(body),
        reasoning=_reasoning(body.get("thinking"), output_config.get("effort")),
        response_format=_response_format(body, output_config),
        stream=check.opt_bool(body.get("stream"), "stream") or False,
    )


# --- messages -------------------------------------------------------------------------------------------------------


def _system_prompt(raw: Any) -> list[Message]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [Message(role="system", content=(Text(raw),))] if raw else []
    parts = _quirk_drop_billing_header(_text_blocks(raw, "system"))
    return [Message(role="system", content=tuple(parts))] if parts else []


def _quirk_drop_billing_header(parts: list[Text]) -> list[Text]:
    """Claude Code's first system block is a billing header for Anthropic's servers, not an instruction to the model."""
    return [p for p in parts if not p.text.startswith(BILLING_HEADER_PREFIX)]


def _quirk_system_turn(content: Any, path: str) -> Message:
    """Claude Code (per-turn-control beta) puts ``role: "system"`` turns inside ``messages``: keep them in place.

    The turn's own ``output_config`` (a per-turn effort) is ignored: the top-level one already sets the effort.
    """
    return Message(role="system", content=tuple(_text_blocks(content, f"{path}.content")))


def _quirk_tool_reference(block: Mapping[str, Any], path: str) -> Text:
    """Claude Code's ToolSearch answers with ``tool_reference`` blocks that unhide deferred tools on Anthropic's side.

    Polar offers deferred tools to the model from the start, so the reference only needs to read as text.
    """
    return Text(f"Tool loaded: {check.string(block.get('tool_name'), f'{path}.tool_name')}")


def _messages(raw: list[Any]) -> list[Message]:
    out: list[Message] = []
    # tool_use id -> tool name, so each tool message can say which tool it answers.
    tool_names: dict[str, str] = {}
    for i, item in enumerate(raw):
        path = f"messages[{i}]"
        turn = check.obj(item, path)
        role = turn.get("role")
        content = turn.get("content")
        if role == "user":
            out.extend(_user_turn(content, path, tool_names))
        elif role == "assistant":
            message = _DECODED_TURNS.assistant_turn(content, path)
            for call in message.tool_calls:
                tool_names[call.id] = call.name
            out.append(message)
        elif role == "system":
            out.append(_quirk_system_turn(content, path))
        else:
            got = repr(role) if isinstance(role, str) else check.json_type(role)
            check.fail(f"{path}.role", f"expected 'user', 'assistant' or 'system', got {got}")
    return out


class _DecodedTurns:
    """Assistant turns already decoded, by the JSON text of their content; least recently used out first, the texts
    kept within ``max_bytes``.

    Every call of an agent session sends the whole history again, so each assistant turn of it is decoded again on
    every later call (its tool inputs re-encoded too). `_assistant_turn` is a pure function of the content (the path
    only names a field in an error), so for an equal content the Message decoded before is the one decoding again
    would build, and IR values are never changed once built, so one serves many calls. Equal means equal JSON text
    (orjson writes an int never as a float, keys in their order) and equal values: the text alone would take a tuple
    for a list, or NaN for null, from a caller that did not parse JSON. Only a turn that decoded without an error is
    kept: a hit skips no check that content has not passed.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._turns: OrderedDict[bytes, tuple[Any, Message]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()  # gateways on other threads' loops decode too

    def assistant_turn(self, content: Any, path: str) -> Message:
        try:
            key = orjson.dumps(content)
        except orjson.JSONEncodeError:  # not JSON (a caller's own objects): decoded, and refused there if wrong
            return _assistant_turn(content, path)
        with self._lock:
            kept = self._turns.get(key)
            if kept is not None and kept[0] == content:
                self._turns.move_to_end(key)
                return kept[1]
        message = _assistant_turn(content, path)
        with self._lock:
            if key in self._turns:
                self._bytes -= len(key)
            self._turns[key] = (content, message)
            self._turns.move_to_end(key)
            self._bytes += len(key)
            while self._bytes > self.max_bytes:
                old, _ = self._turns.popitem(last=False)
                self._bytes -= len(old)
        return message


# a few thousand turns of typical sessions (the contents and decoded turns kept take a few times as much again)
_DECODED_TURNS = _DecodedTurns(max_bytes=4 * 1024 * 1024)


def _user_turn(content: Any, path: str, tool_names: Mapping[str, str]) -> list[Message]:
    results: list[Message] = []
    parts: list[Part] = []
    for block, block_path in _blocks(content, f"{path}.content"):
        kind = _block_type(block, block_path)
        if kind == "tool_result":
            results.append(_tool_result(block, block_path, tool_names))
            continue
        decoded = _content_part(block, kind, block_path)
        if decoded is None:
            _unsupported(block_path, kind, "a user turn")
        parts.extend(decoded)
    if parts or not results:
        results.append(Message(role="user", content=tuple(parts)))
    return results


def _tool_result(block: Mapping[str, Any], path: str, tool_names: Mapping[str, str]) -> Message:
    call_id = check.string(block.get("tool_use_id"), f"{path}.tool_use_id")
    content = block.get("content")
    parts: list[Part] = []
    if isinstance(content, str):
        parts.append(Text(content))
    elif content is not None:
        for inner, inner_path in _blocks(content, f"{path}.content"):
            kind = _block_type(inner, inner_path)
            if kind == "tool_reference":
                parts.append(_quirk_tool_reference(inner, inner_path))
                continue
            decoded = _content_part(inner, kind, inner_path)
            if decoded is None:
                _unsupported(inner_path, kind, "a tool_result")
            parts.extend(decoded)
    return Message(
        role="tool",
        content=tuple(parts),
        tool_call_id=call_id,
        name=tool_names.get(call_id),
        is_error=check.opt_bool(block.get("is_error"), f"{path}.is_error") or False,
    )


def _assistant_turn(content: Any, path: str) -> Message:
    parts: list[Part] = []
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    for block, block_path in _blocks(content, f"{path}.content"):
        kind = _block_type(block, block_path)
        if kind == "text":
            parts.append(Text(check.string(block.get("text"), f"{block_path}.text")))
        elif kind == "thinking":
            # Lenient: with ``display: "omitted"`` the thinking text may come back empty or absent.
            thoughts.append(check.opt_str(block.get("thinking"), f"{block_path}.thinking") or "")
        elif kind == "redacted_thinking":
            continue  # encrypted by Anthropic: nothing a local model can read.
        elif kind == "tool_use":
            calls.append(_tool_use(block, block_path))
        else:
            _unsupported(block_path, kind, "an assistant turn")
    reasoning = "\n".join(filter(None, thoughts)) or None
    return Message(role="assistant", content=tuple(parts), reasoning=reasoning, tool_calls=tuple(calls))


def _tool_use(block: Mapping[str, Any], path: str) -> ToolCall:
    arguments = check.opt_obj(block.get("input"), f"{path}.input") or {}
    try:
        if _TOOL_INPUT_C_ENCODER is not None:
            text = "".join(_TOOL_INPUT_C_ENCODER(arguments, 0))
        else:
            text = _TOOL_INPUT_ENCODER.encode(arguments)
    except (ValueError, RecursionError) as exc:
        raise RequestError(f"{path}.input: cannot be encoded as JSON ({exc})") from exc
    return ToolCall(
        id=check.string(block.get("id"), f"{path}.id"),
        name=check.string(block.get("name"), f"{path}.name"),
        arguments=text,
    )


# --- content blocks -------------------------------------------------------------------------------------------------


def _blocks(content: Any, path: str) -> list[tuple[dict[str, Any], str]]:
    """The content's blocks with their paths; a plain string is one text block."""
    if isinstance(content, str):
        return [({"type": "text", "text": content}, path)]
    blocks = []
    for i, item in enumerate(check.array(content, path)):
        block_path = f"{path}[{i}]"
        blocks.append((check.obj(item, block_path), block_path))
    return blocks


def _text_blocks(content: Any, path: str) -> list[Text]:
    texts: list[Text] = []
    for block, block_path in _blocks(content, path):
        kind = _block_type(block, block_path)
        if kind != "text":
            _unsupported(block_path, kind, "a system prompt")
        texts.append(Text(check.string(block.get("text"), f"{block_path}.text")))
    return texts


def _content_part(block: Mapping[str, Any], kind: str, path: str) -> list[Part] | None:
    """Parts for the block types user turns and tool results share; None for any other type."""
    if kind == "text":
        return [Text(check.string(block.get("text"), f"{path}.text"))]
    if kind == "image":
        return [_image(check.obj(block.get("source"), f"{path}.source"), f"{path}.source")]
    if kind == "document":
        return _document(check.obj(block.get("source"), f"{path}.source"), f"{path}.source")
    if kind == "search_result":
        return [Text(t.text) for t in _text_blocks(block.get("content"), f"{path}.content")]
    return None


def _image(source: Mapping[str, Any], path: str) -> Image:
    kind = check.string(source.get("type"), f"{path}.type")
    if kind == "base64":
        media_type = check.string(source.get("media_type"), f"{path}.media_type")
        return Image(f"data:{media_type};base64,{check.string(source.get('data'), f'{path}.data')}")
    if kind == "url":
        return Image(check.string(source.get("url"), f"{path}.url"))
    check.fail(f"{path}.type", f"unsupported image source {kind!r} (expected 'base64' or 'url')")


def _document(source: Mapping[str, Any], path: str) -> list[Part]:
    kind = check.string(source.get("type"), f"{path}.type")
    if kind == "text":
        return [Text(check.string(source.get("data"), f"{path}.data"))]
    if kind == "content":
        content = source.get("content")
        if isinstance(content, str):
            return [Text(content)]
        parts: list[Part] = []
        for block, block_path in _blocks(content, f"{path}.content"):
            inner = _block_type(block, block_path)
            decoded = _content_part(block, inner, block_path) if inner in ("text", "image") else None
            if decoded is None:
                _unsupported(block_path, inner, "a document")
            parts.extend(decoded)
        return parts
    check.fail(
        f"{path}.type", f"unsupported document source {kind!r}: only 'text' and 'content' documents are supported"
    )


def _block_type(block: Mapping[str, Any], path: str) -> str:
    return check.string(block.get("type"), f"{path}.type")


def _unsupported(path: str, kind: str, where: str) -> NoReturn:
    check.fail(f"{path}.type", f"unsupported block type {kind!r} in {where}")


# --- tools, sampling, reasoning -------------------------------------------------------------------------------------


def _tools(raw: Any) -> tuple[Tool, ...]:
    if raw is None:
        return ()
    tools: list[Tool] = []
    for i, item in enumerate(check.array(raw, "tools")):
        path = f"tools[{i}]"
        tool = check.obj(item, path)
        if _is_server_tool(tool, path):
            continue
        tools.append(
            Tool(
                name=check.string(tool.get("name"), f"{path}.name"),
                description=check.opt_str(tool.get("description"), f"{path}.description") or "",
                parameters=check.obj(tool.get("input_schema"), f"{path}.input_schema"),
            )
        )
    return tuple(tools)


def _is_server_tool(tool: Mapping[str, Any], path: str) -> bool:
    """Anthropic-defined tools (``web_search_20250305``, ``bash_20250124``...) have no schema we could offer upstream:
    hidden. No ``type`` or ``custom`` is a client tool; any other type is a 400 (translate/README.md, "Tool types")."""
    kind = check.opt_str(tool.get("type"), f"{path}.type")
    if kind is None or kind == "custom":
        return False
    if kind == "mcp_toolset" or _SERVER_TOOL_TYPE.fullmatch(kind):
        return True
    check.fail(f"{path}.type", f"unsupported tool type {kind!r}")


def _tool_choice(raw: Any) -> tuple[ToolChoice | None, bool | None]:
    if raw is None:
        return None, None
    choice = check.obj(raw, "tool_choice")
    kind = check.string(choice.get("type"), "tool_choice.type")
    mode = _TOOL_CHOICE_MODES.get(kind)
    if mode is None:
        check.fail("tool_choice.type", f"expected 'auto', 'any', 'tool' or 'none', got {kind!r}")
    name = check.string(choice.get("name"), "tool_choice.name") if mode == "tool" else None
    result = ToolChoice(mode=mode, name=name)
    disable = check.opt_bool(choice.get("disable_parallel_tool_use"), "tool_choice.disable_parallel_tool_use")
    return result, None if disable is None else not disable


def _sampling(body: Mapping[str, Any]) -> Sampling:
    stop = body.get("stop_sequences")
    stops = [] if stop is None else check.array(stop, "stop_sequences")
    return Sampling(
        max_tokens=check.opt_int(body.get("max_tokens"), "max_tokens"),
        temperature=check.opt_float(body.get("temperature"), "temperature"),
        top_p=check.opt_float(body.get("top_p"), "top_p"),
        top_k=check.opt_int(body.get("top_k"), "top_k"),
        stop=tuple(check.string(s, f"stop_sequences[{i}]") for i, s in enumerate(stops)),
    )


def _reasoning(thinking: Any, effort: Any) -> Reasoning | None:
    if thinking is None and effort is None:
        return None
    enabled: bool | None = None
    budget: int | None = None
    if thinking is not None:
        config = check.obj(thinking, "thinking")
        kind = check.string(config.get("type"), "thinking.type")
        if kind == "enabled":
            enabled, budget = True, check.opt_int(config.get("budget_tokens"), "thinking.budget_tokens")
        elif kind in ("adaptive", "between_tools"):
            enabled = True
        elif kind == "disabled":
            enabled = False
        else:
            check.fail("thinking.type", f"expected 'enabled', 'adaptive' or 'disabled', got {kind!r}")
    level: str | None = None
    if effort is not None:
        name = check.string(effort, "output_config.effort")
        level = _EFFORTS.get(name)
        if level is None:
            check.fail("output_config.effort", f"expected one of {', '.join(_EFFORTS)}, got {name!r}")
    return Reasoning(enabled=enabled, effort=level, budget_tokens=budget)


def _response_format(body: Mapping[str, Any], output_config: Mapping[str, Any]) -> ResponseFormat | None:
    # ``output_format`` is the structured-outputs beta's spelling before it moved into ``output_config.format``.
    path, raw = "output_config.format", output_config.get("format")
    if raw is None:
        path, raw = "output_format", body.get("output_format")
    if raw is None:
        return None
    fmt = check.obj(raw, path)
    kind = check.string(fmt.get("type"), f"{path}.type")
    if kind != "json_schema":
        check.fail(f"{path}.type", f"expected 'json_schema', got {kind!r}")
    return ResponseFormat(type="json_schema", schema=check.obj(fmt.get("schema"), f"{path}.schema"))


CODEC = Codec(
    "anthropic_messages", decode_request, encode_response, encode_stream, encode_error, tool_call_id_prefix="toolu_"
)
