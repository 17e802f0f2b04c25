"""Google Gemini API (``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse``).

Harnesses: Gemini CLI (a non-streaming router call in JSON mode, then streaming main turns) and Pi's
``google-generative-ai`` provider; the google-genai Python SDK speaks the same JSON under ``/v1/``.

Mental model: a Gemini conversation is a list of ``contents``, each a role (``user``/``model``) and a list of
``parts``; a part holds exactly one datum (text, inline image, file URI, function call, function response). The model
name and the stream flag live in the path, so they come from the `Route`. Decoding reshapes parts into OpenAI-style
messages:

- ``systemInstruction`` (a Content or a plain string) becomes the first ``system`` message;
- a ``model`` content's ``thought: true`` text parts become its ``reasoning``, its ``functionCall`` parts its
  ``tool_calls``;
- each ``functionResponse`` part of a user content becomes its own ``tool`` message, placed before the rest of that
  content, because OpenAI Chat wants tool results right after the assistant turn that called the tools.

Function-call ids are optional in Gemini (Gemini CLI invents ``<name>_<ts>_<n>``; Pi sends none), but every IR tool
message must name the call it answers. Rule 1: a call without an id gets ``call_<content index>_<part index>``, which
is stable as the history grows. Rule 2: a response answers the call with its id; without one (or with an id that
matches no call) it answers the earliest unanswered call of the same name (`_CallLinker`).

Every field is read under both proto3 spellings (see `google_genai_fields`). Tools and generation settings are decoded
in `google_genai_config`, the response, stream and errors encoded in `google_genai_encode`. Harness quirks are the
``quirk_*`` functions of these modules.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from polar_cli.translate.codec import Codec, Route
from polar_cli.translate.google_genai_config import (
    decode_reasoning,
    decode_response_format,
    decode_sampling,
    decode_tool_choice,
    decode_tools,
)
from polar_cli.translate.google_genai_encode import (
    encode_error,
    encode_json_stream,
    encode_response,
    encode_stream,
    quirk_unwrap_invalid_arguments,
)
from polar_cli.translate.google_genai_fields import field, opt_bool, opt_list, opt_obj, opt_str, req_str, snake
from polar_cli.translate.ir import ChatRequest, Image, JsonObject, Message, Part, Text, ToolCall
from polar_cli.translate.json_checks import array, at, fail, json_text, obj, request_body

__all__ = ["CODEC", "decode_request", "encode_error", "encode_response", "encode_stream"]

# The one datum a Part may hold (proto oneof ``data``). Only the first five are understood.
_PART_DATA = (
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
)
# Either spelling of a datum field -> its camelCase name.
_PART_DATA_FIELDS = {spelling: name for name in _PART_DATA for spelling in (name, snake(name))}


def decode_request(body: JsonObject, route: Route) -> ChatRequest:
    """Decode a ``generateContent`` request body into the IR; the model and stream flag come from the route.

    Raises `RequestError` naming the offending field (``contents[2].parts[0].functionCall.name: missing``) for
    anything malformed or unsupported. Ignored on purpose: ``safetySettings``, ``labels``, thought signatures,
    ``functionResponse.willContinue``/``scheduling``, generation settings with no upstream meaning
    (``responseLogprobs``, ``mediaResolution``, ``speechConfig`` ...) and unknown top-level fields.
    """
    body = request_body(body)
    model = route.model or opt_str(body, "model", "")
    if not model:
        fail("model", "missing (Gemini names the model in the path: /v1beta/models/{model}:generateContent)")
    if field(body, "cachedContent") is not None:
        fail("cachedContent", "cached contents are not supported; send the full conversation")
    contents = array(field(body, "contents") or [], "contents")
    if not contents:
        fail("contents", "missing or empty")
    config = opt_obj(body, "generationConfig", "") or {}
    tool_choice = decode_tool_choice(opt_obj(body, "toolConfig", ""))
    return ChatRequest(
        model=model,
        messages=(*_system_instruction(field(body, "systemInstruction")), *_contents(contents)),
        tools=decode_tools(field(body, "tools")),
        tool_choice=tool_choice,
        sampling=decode_sampling(config),
        reasoning=decode_reasoning(config),
        response_format=decode_response_format(config),
        stream=bool(route.stream),
    )


# --- contents -------------------------------------------------------------------------------------------------------


class _CallLinker:
    """Matches function responses to function calls (Rule 2 of the module docstring)."""

    def __init__(self) -> None:
        self._known: set[str] = set()
        self._unanswered: list[ToolCall] = []

    def add(self, calls: tuple[ToolCall, ...]) -> None:
        self._known.update(c.id for c in calls)
        self._unanswered.extend(calls)

    def link(self, call_id: str | None, name: str, path: str) -> str:
        if call_id and call_id in self._known:
            self._unanswered = [c for c in self._unanswered if c.id != call_id]
            return call_id
        return quirk_link_response_by_name(self._unanswered, name, path)


def quirk_link_response_by_name(unanswered: list[ToolCall], name: str, path: str) -> str:
    """Pi sends ``functionResponse`` without an id: it answers the earliest unanswered call of the same name.

    The matched call is removed from ``unanswered``, so two calls of one tool are answered in order.
    """
    for i, call in enumerate(unanswered):
        if call.name == name:
            del unanswered[i]
            return call.id
    fail(path, f"no earlier functionCall named {name!r} is left for this functionResponse to answer")


def quirk_function_role(role: str) -> str:
    """Older Gemini clients send function responses in a content with the legacy role ``function``: a user turn."""
    return "user" if role == "function" else role


def _system_instruction(raw: Any) -> list[Message]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [Message(role="system", content=(Text(raw),))] if raw else []
    path = "systemInstruction"
    parts = opt_list(obj(raw, path), "parts", path) or []
    texts = [Text(req_str(obj(p, f"{path}.parts[{i}]"), "text", f"{path}.parts[{i}]")) for i, p in enumerate(parts)]
    texts = [t for t in texts if t.text]
    return [Message(role="system", content=tuple(texts))] if texts else []


def _contents(raw: list[Any]) -> list[Message]:
    out: list[Message] = []
    linker = _CallLinker()
    previous_role = None
    for ci, item in enumerate(raw):
        path = f"contents[{ci}]"
        content = obj(item, path)
        role = quirk_function_role(opt_str(content, "role", path) or "user")
        parts = opt_list(content, "parts", path) or []
        if role == "model":
            message = _model_turn(parts, ci, path)
            linker.add(message.tool_calls)
            if previous_role == "model":
                out[-1] = quirk_merge_model_contents(out[-1], message)
            else:
                out.append(message)
        elif role == "user":
            out.extend(_user_turn(parts, path, linker))
        else:
            fail(at(path, "role"), f"expected 'user' or 'model', got {role!r}")
        previous_role = role
    return out


def quirk_merge_model_contents(first: Message, second: Message) -> Message:
    """The google-genai SDK's streaming chat records each chunk as its own ``model`` content: one turn, one message."""
    reasoning = (first.reasoning or "") + (second.reasoning or "")
    return Message(
        role="assistant",
        content=first.content + second.content,
        reasoning=reasoning or None,
        tool_calls=first.tool_calls + second.tool_calls,
    )


def _part_kind(part: Mapping[str, Any], path: str) -> str | None:
    """Which datum the part holds; None for a part that carries only metadata (see `quirk_signature_only_part`)."""
    # Walks the part's own keys (usually one) instead of looking up seven fields under two spellings each.
    kinds = {_PART_DATA_FIELDS[k] for k, v in part.items() if k in _PART_DATA_FIELDS and v is not None}
    if len(kinds) > 1:
        fail(path, f"a part holds one datum, got {', '.join(sorted(kinds, key=_PART_DATA.index))}")
    if kinds:
        return kinds.pop()
    if quirk_signature_only_part(part):
        return None
    fail(path, f"no data field (expected one of {', '.join(_PART_DATA[:5])})")


def _parts(parts: list[Any], path: str) -> Iterator[tuple[int, str, Mapping[str, Any], str | None]]:
    """Each part of a content, read as it is reached: its index, its path, the part and the datum it holds."""
    for pi, raw in enumerate(parts):
        ppath = f"{path}.parts[{pi}]"
        part = obj(raw, ppath)
        yield pi, ppath, part, _part_kind(part, ppath)


def quirk_signature_only_part(part: Mapping[str, Any]) -> bool:
    """Gemini 3 may return a part holding only a ``thoughtSignature``, which clients echo back: it carries nothing."""
    return field(part, "thoughtSignature") is not None


def _model_turn(parts: list[Any], ci: int, path: str) -> Message:
    content: list[Part] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for pi, ppath, part, kind in _parts(parts, path):
        if kind == "text":
            text = req_str(part, "text", ppath)
            if opt_bool(part, "thought", ppath):
                reasoning.append(text)
            elif text:
                content.append(Text(text))
        elif kind == "functionCall":
            calls.append(_function_call(field(part, kind), f"call_{ci}_{pi}", at(ppath, kind)))
        elif kind is not None:
            fail(ppath, f"unsupported part {kind!r} in a model turn")
    return Message(
        role="assistant", content=tuple(content), reasoning="".join(reasoning) or None, tool_calls=tuple(calls)
    )


def _function_call(raw: Any, position_id: str, path: str) -> ToolCall:
    call = obj(raw, path)
    name = req_str(call, "name", path)
    args = opt_obj(call, "args", path) or {}
    arguments = quirk_unwrap_invalid_arguments(args)
    if arguments is None:
        arguments = json_text(args, at(path, "args"))
    return ToolCall(id=opt_str(call, "id", path) or position_id, name=name, arguments=arguments)


def _user_turn(parts: list[Any], path: str, linker: _CallLinker) -> list[Message]:
    results: list[Message] = []
    content: list[Part] = []
    for _, ppath, part, kind in _parts(parts, path):
        if kind == "text":
            text = req_str(part, "text", ppath)
            if text:
                content.append(Text(text))
        elif kind in ("inlineData", "fileData"):
            content.append(_image(kind, field(part, kind), at(ppath, kind)))
        elif kind == "functionResponse":
            results.append(_function_response(field(part, kind), at(ppath, kind), linker))
        elif kind is not None:
            fail(ppath, f"unsupported part {kind!r} in a user turn")
    return [*results, Message(role="user", content=tuple(content))] if content else results


def _image(kind: str, raw: Any, path: str) -> Image:
    blob = obj(raw, path)
    if kind == "inlineData":
        mime = req_str(blob, "mimeType", path)
        url = f"data:{mime};base64,{req_str(blob, 'data', path)}"
    else:
        mime = opt_str(blob, "mimeType", path) or "image/*"
        url = req_str(blob, "fileUri", path)
    if not mime.startswith("image/"):
        fail(at(path, "mimeType"), f"unsupported media type {mime!r} (only images are supported)")
    return Image(url)


def _function_response(raw: Any, path: str, linker: _CallLinker) -> Message:
    result = obj(raw, path)
    name = req_str(result, "name", path)
    call_id = linker.link(opt_str(result, "id", path), name, path)
    response = opt_obj(result, "response", path) or {}
    text, is_error = _tool_result_text(response, at(path, "response"))
    # Multimodal function responses (Gemini 3) nest images in functionResponse.parts.
    images: list[Part] = []
    for i, item in enumerate(opt_list(result, "parts", path) or []):
        ipath = f"{at(path, 'parts')}[{i}]"
        blob = obj(item, ipath)
        kind = "inlineData" if field(blob, "inlineData") is not None else "fileData"
        if field(blob, kind) is None:
            fail(ipath, "expected inlineData or fileData")
        images.append(_image(kind, field(blob, kind), at(ipath, kind)))
    return Message(role="tool", content=(Text(text), *images), tool_call_id=call_id, name=name, is_error=is_error)


def _tool_result_text(response: Mapping[str, Any], path: str) -> tuple[str, bool]:
    """Google's convention is ``{"output": ...}`` for a result and ``{"error": ...}`` for a failure; a lone string
    under either key is the result text itself, anything else is sent as its JSON text."""
    if len(response) == 1:
        ((key, value),) = response.items()
        if key in ("output", "error") and isinstance(value, str):
            return value, key == "error"
    return json_text(response, path), False


CODEC = Codec(
    "google_genai", decode_request, encode_response, encode_stream, encode_error, encode_json_stream=encode_json_stream
)
