"""Reasoning re-injection (``engine.reasoning: reinject``): each assistant turn gets back the reasoning it was sampled
with.

Harnesses drop the model's reasoning when they send the history back (most APIs have no field for it, and those that
do are often configured not to echo it). Templates that keep reasoning inside a tool loop (Qwen3.5, Qwen3 after the
last user query) then render a different turn than the model wrote, and the next prompt no longer extends the last.
The gateway remembers, per session, the reasoning of each answer it gave, keyed by the turn's tool-call ids (minted
unique per session by the gateway) and by its content (text, call names, parsed arguments: for harnesses that send
calls back without ids); a turn sent back without reasoning gets it back. A turn the harness sends with reasoning of
its own is left as sent.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from polar_cli.gateway.continuation import content_text, parsed_arguments

# turns remembered per session; an agent session rarely has more (the oldest go first)
LIMIT = 4096


def turn_key(message: Mapping[str, Any]) -> str | None:
    """The key of an assistant turn: its tool-call ids, else `content_key`."""
    ids = [str(c.get("id")) for c in message.get("tool_calls") or () if isinstance(c, Mapping) and c.get("id")]
    if ids:
        return "calls:" + ",".join(ids)
    return content_key(message)


def content_key(message: Mapping[str, Any]) -> str | None:
    """A digest of a turn's text and its calls' names and parsed arguments; None for an empty turn.

    For harnesses that send calls back without the gateway's ids (Pi on the Gemini API sends a ``functionCall``
    with no id: the decoder numbers it by position).
    """
    text = content_text(message.get("content"))
    calls = []
    for call in message.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(fn, Mapping):
            calls.append([fn.get("name"), parsed_arguments(fn.get("arguments"))])
    if not text.strip() and not calls:
        return None
    canonical = orjson.dumps([text.strip(), calls], option=orjson.OPT_SORT_KEYS)
    return "content:" + hashlib.sha256(canonical).hexdigest()


class ReasoningMemory:
    def __init__(self, limit: int = LIMIT) -> None:
        self.limit = limit
        self._by_key: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_key)

    def remember(self, answer: Mapping[str, Any]) -> None:
        reasoning = answer.get("reasoning_content")
        if not reasoning:
            return
        for key in dict.fromkeys((turn_key(answer), content_key(answer))):
            if key is not None:
                self._by_key[key] = str(reasoning)
                self._by_key.move_to_end(key)
        while len(self._by_key) > self.limit:
            self._by_key.popitem(last=False)

    def _lookup(self, message: Mapping[str, Any]) -> str | None:
        # the id key is cheap; the content key (a digest of text and parsed arguments) only when it misses
        key = turn_key(message)
        if key is not None and key in self._by_key:
            return self._by_key[key]
        key = content_key(message)
        return self._by_key.get(key) if key is not None else None

    def reinject(self, messages: Sequence[Mapping[str, Any]]) -> tuple[list[Mapping[str, Any]], int]:
        """``messages`` with remembered reasoning put back into assistant turns sent without any; how many."""
        out: list[Mapping[str, Any]] = []
        restored = 0
        for m in messages:
            if m.get("role") == "assistant" and not m.get("reasoning_content") and self._by_key:
                reasoning = self._lookup(m)
                if reasoning is not None:
                    m = {**m, "reasoning_content": reasoning}
                    restored += 1
            out.append(m)
        return out, restored
