"""A trace's conversation in OpenAI chat format, the conversational tool format SFT stacks (TRL's SFTTrainer) read.

Rebuilt from the capture records: the final call's normalised request (the OpenAI Chat body the gateway sent
upstream: ``messages`` and ``tools``) plus that call's answer (``response.choices[0].message``). Every message carries
the same keys (``role, content, reasoning_content, tool_calls, tool_call_id, name``; absent ones are None or empty) so
all rows of a corpus share one Arrow schema. ``content`` is always a string and tool-call ``arguments`` always a JSON
string, as in the OpenAI API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from polar_cli.capture import CaptureRecord

Message = dict[str, Any]


def chat_message(raw: Mapping[str, Any], *, role: str | None = None) -> Message:
    """One OpenAI chat message in the uniform shape above."""
    calls = raw.get("tool_calls") or ()
    return {
        "role": role or str(raw.get("role") or ""),
        "content": flatten_content(raw.get("content")),
        "reasoning_content": reasoning_of(raw),
        "tool_calls": [tool_call(c) for c in calls if isinstance(c, Mapping)],
        "tool_call_id": _str_or_none(raw.get("tool_call_id")),
        "name": _str_or_none(raw.get("name")),
    }


def flatten_content(content: Any) -> str:
    """Content as one string: text parts joined by a newline, as vLLM joins them before applying the chat template.

    Non-text parts (images) are dropped: no chat-format string can carry them.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
        return "\n".join(t for t in texts if isinstance(t, str))
    return str(content)


def reasoning_of(message: Mapping[str, Any]) -> str | None:
    """The reasoning text: SGLang and the gateway call it ``reasoning_content``, vLLM ``reasoning``."""
    value = message.get("reasoning_content") or message.get("reasoning")
    return value if isinstance(value, str) and value else None


def tool_call(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A tool call with ``arguments`` as a JSON string, whichever form the record holds."""
    fn = raw.get("function")
    fn = fn if isinstance(fn, Mapping) else {}
    args = fn.get("arguments")
    if not isinstance(args, str):
        args = orjson.dumps(args if args is not None else {}).decode()
    return {
        "id": str(raw.get("id") or ""),
        "type": "function",
        "function": {"name": str(fn.get("name") or ""), "arguments": args},
    }


def request_messages(normalized: Mapping[str, Any] | None) -> list[Message]:
    """The messages of a normalised request, in the uniform shape."""
    raw = (normalized or {}).get("messages") or []
    return [chat_message(m) for m in raw if isinstance(m, Mapping)]


def request_tools(normalized: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The tool definitions of a normalised request (OpenAI ``{"type": "function", "function": {...}}`` entries)."""
    raw = (normalized or {}).get("tools") or []
    return [dict(t) for t in raw if isinstance(t, Mapping)]


def response_message(response: Mapping[str, Any] | None) -> Message | None:
    """The assistant message the upstream answered with, or None when the record has no answer."""
    choices = (response or {}).get("choices") or []
    if not choices or not isinstance(choices[0], Mapping):
        return None
    message = choices[0].get("message")
    return chat_message(message, role="assistant") if isinstance(message, Mapping) else None


def conversation(
    first: CaptureRecord, last: CaptureRecord
) -> tuple[list[Message], list[Message], list[dict[str, Any]]]:
    """(prompt_messages, response_messages, tools) of a trace that runs from call ``first`` to call ``last``.

    The prompt is what the first call was asked; the response is everything the last call's request added after it,
    then the last call's answer. Earlier answers come back as the harness re-sent them in later requests.
    """
    prompt = request_messages(first.normalized)
    final = prompt.copy() if first is last else request_messages(last.normalized)
    reply = response_message(last.response)
    if reply is not None:
        final.append(reply)
    return prompt, final[len(prompt) :], request_tools(last.normalized)


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None
