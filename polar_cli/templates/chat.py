"""A chat template, rendered the way SGLang 0.5.23 renders ``/v1/chat/completions`` (and vLLM, which does the same).

Before the template sees them, SGLang turns the request's messages into plain dicts (`template_message`):
None-valued keys dropped, None content made "", tool-message text parts joined by a space, an assistant's tool-call
arguments (a JSON string on the wire) parsed into the object templates render with ``tojson``, and list content
flattened to its text parts joined by a space unless the template iterates over ``message.content`` (then the parts
are kept: the "openai" content format, `content_format`). Tools are passed as the request's
``{"type": "function", "function": ...}`` objects. The template is then rendered by transformers'
``render_jinja_template`` (what ``apply_chat_template`` calls), with the tokenizer's special-token names
(``bos_token``, ``eos_token``) in scope.

A template that raises (``raise_exception``, a Jinja error) fails the render with `TemplateError` carrying the
template's own message, as SGLang answers such a call with a 400 carrying it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from polar_cli.errors import ConfigError, PolarError

ContentFormat = Literal["string", "openai"]
_MEDIA_WORDS = ("image", "audio", "video", "vision")


class TemplateError(PolarError):
    """The chat template refused to render a conversation (its own message, as the server would report it)."""


def content_format(source: str) -> ContentFormat:
    """Whether a template reads message content as a string or as a list of parts (SGLang's detection).

    Templates that mention media, or loop over ``message.content`` (``msg``/``m`` too), get the parts.
    """
    if any(word in source for word in _MEDIA_WORDS):
        return "openai"
    try:
        import jinja2
        from jinja2 import nodes

        tree = jinja2.Environment().parse(source)
    except Exception:  # a template jinja cannot parse renders nothing anyway; SGLang falls back to "string"
        return "string"
    for loop in tree.find_all(nodes.For):
        if _reads_content(loop.iter):
            return "openai"
    return "string"


def _reads_content(node: Any) -> bool:
    from jinja2 import nodes

    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        key, base = node.arg.value, node.node
    elif isinstance(node, nodes.Getattr):
        key, base = node.attr, node.node
    else:
        return False
    return key == "content" and isinstance(base, nodes.Name) and base.name in ("message", "msg", "m")


def template_message(message: Mapping[str, Any], fmt: ContentFormat = "string") -> dict[str, Any]:
    """A chat message as SGLang hands it to the template (see the module docstring)."""
    out = {k: v for k, v in message.items() if v is not None}
    content = message.get("content")
    role = message.get("role")
    if content is None:
        out["content"] = ""
    elif isinstance(content, list):
        if role == "tool" and all(_is_text_part(p, ("text",)) or isinstance(p, str) for p in content):
            out["content"] = " ".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content)
        elif fmt == "openai":
            out["content"] = [_part(p) for p in content if isinstance(p, Mapping) and _part(p) is not None]
        else:
            out["content"] = " ".join(str(p.get("text", "")) for p in content if _is_text_part(p))
    calls = message.get("tool_calls")
    if role == "assistant" and isinstance(calls, list):
        out["tool_calls"] = [_call_with_object_arguments(c) for c in calls]
    return out


def _is_text_part(part: Any, kinds: tuple[str, ...] = ("text", "input_text")) -> bool:
    return isinstance(part, Mapping) and part.get("type") in kinds


def _part(part: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = part.get("type")
    if kind in ("text", "input_text"):
        return {"type": "text", "text": part.get("text", "")}
    if kind in ("image_url", "input_image"):
        return {"type": "image"}
    if kind in ("video_url", "audio_url"):
        return {"type": str(kind).removesuffix("_url")}
    return None


def _call_with_object_arguments(call: Any) -> Any:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("arguments"), str):
        return call
    try:
        parsed = json.loads(function["arguments"])
    except ValueError:
        return call  # SGLang refuses such a request; rendering the string keeps a scripted engine answering
    if not isinstance(parsed, dict):
        return call
    return {**call, "function": {**function, "arguments": parsed}}


_FUNCTION_FIELDS = ("description", "name", "parameters", "strict", "defer_loading")


def sglang_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Tools as SGLang 0.5.23 hands them to the template: each request tool through its ``Tool`` model's dump.

    The wrapper keeps ``type``, ``function`` and an always-present ``defer_loading`` (null when unset: the Qwen
    templates write it into the prompt with ``tojson``); the function keeps its known fields in the client's order, then
    the missing of ``description``/``name``/``parameters`` as null, ``strict``/``defer_loading`` only when set.
    """
    if not tools:
        return None
    out = []
    for tool in tools:
        fn = tool.get("function")
        fn = fn if isinstance(fn, Mapping) else {}
        wrapper_defer = tool.get("defer_loading")
        values = {k: fn.get(k) for k in _FUNCTION_FIELDS}
        if values["defer_loading"] is None:
            values["defer_loading"] = wrapper_defer
        order = [k for k in fn if k in _FUNCTION_FIELDS] + [k for k in _FUNCTION_FIELDS if k not in fn]
        function = {k: values[k] for k in order if values[k] is not None or k not in ("strict", "defer_loading")}
        out.append({"type": tool.get("type", "function"), "function": function, "defer_loading": wrapper_defer})
    return out


@dataclass(frozen=True)
class ChatTemplate:
    """A template's Jinja source and the special-token names it may use (``bos_token``, ``eos_token``, ...)."""

    source: str
    name: str = "template"
    variables: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_file(cls, path: Path, variables: Mapping[str, str] | None = None) -> ChatTemplate:
        try:
            source = path.read_text()
        except OSError as exc:
            raise ConfigError(f"chat template {path}: {exc.strerror or exc}") from exc
        return cls(source, path.name.removesuffix(".jinja"), dict(variables or {}))

    @cached_property
    def content_format(self) -> ContentFormat:
        return content_format(self.source)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        *,
        generation_prompt: bool = True,
    ) -> str:
        """The prompt text for ``messages`` (raises `TemplateError` where the server would answer 400)."""
        from transformers.utils.chat_template_utils import render_jinja_template

        prepared = [template_message(m, self.content_format) for m in messages]
        try:
            text = render_jinja_template(
                conversations=[prepared],
                tools=[dict(t) for t in tools] if tools else None,
                chat_template=self.source,
                add_generation_prompt=generation_prompt,
                **{**self.variables, **dict(kwargs or {})},
            )
        except Exception as exc:  # the template's raise_exception, or any Jinja failure while rendering
            raise TemplateError(str(exc) or type(exc).__name__) from exc
        rendered: Any = text
        if isinstance(rendered, tuple):  # (one text per conversation, generation indices)
            rendered = rendered[0]
        return str(rendered[0] if isinstance(rendered, list) else rendered)
