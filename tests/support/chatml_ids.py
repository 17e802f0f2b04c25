"""Deterministic, prefix-stable token ids for the inference-server test doubles.

Not a real tokenizer: a ChatML-like template renders each message, and each text piece (a word with
its leading space, a run of punctuation, a run of whitespace) maps to a stable hash in a Qwen-sized
vocabulary. Two rules make the ids behave like a real server's for the gateway's purposes:

Rule 1 (prefix stability): every message is tokenised on its own, so the ids of a conversation are the
concatenation of its messages' ids. A conversation grown by appending messages therefore yields prompt
ids that extend the previous call's prompt ids exactly.

Rule 2 (continuation): the generation prompt is ``<|im_start|>`` + ``assistant\\n`` and a reply samples
``ids(raw text) + [eot]``; an assistant message in the history renders as generation prompt + the same
raw-text ids + ``eot`` + ``\\n``. So the next call's prompt starts with the previous prompt ids followed
by the previous sampled ids, as long as the gateway sends the reply back unchanged.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

DEFAULT_EOT_ID = 151645  # Qwen3's <|im_end|>
IM_START_ID = 151644
WORD_VOCAB = 151643  # ordinary pieces hash into [0, 151643); the special ids sit above
# "<|im_end|>" is absent: it maps to the configurable end-of-turn id.
FIXED_SPECIAL_IDS: Mapping[str, int] = {
    "<|im_start|>": IM_START_ID,
    "<tool_call>": 151657,
    "</tool_call>": 151658,
    "<think>": 151667,
    "</think>": 151668,
}
IM_END = "<|im_end|>"
THINK_END_ID = FIXED_SPECIAL_IDS["</think>"]

_SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in [*FIXED_SPECIAL_IDS, IM_END]) + ")")
_PIECE_RE = re.compile(r" ?\w+| ?[^\w\s]+|\s+")

Piece = tuple[int, str]


def _stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def text_pieces(text: str, eot_id: int = DEFAULT_EOT_ID) -> list[Piece]:
    """(id, text) per piece of `text`; special markers become their single ids."""
    pieces: list[Piece] = []
    for chunk in _SPECIAL_RE.split(text):
        if not chunk:
            continue
        if chunk == IM_END:
            pieces.append((eot_id, chunk))
        elif chunk in FIXED_SPECIAL_IDS:
            pieces.append((FIXED_SPECIAL_IDS[chunk], chunk))
        else:
            pieces.extend((_stable_hash(p) % WORD_VOCAB, p) for p in _PIECE_RE.findall(chunk))
    return pieces


def content_text(content: Any) -> str:
    """Flatten OpenAI message content (string, parts list or None) to text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        if isinstance(part, Mapping) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
        elif isinstance(part, Mapping):
            parts.append(f"<{part.get('type', 'part')}>")
    return "".join(parts)


def canonical_arguments(arguments: Any) -> str:
    """Tool-call arguments as the double renders them: JSON re-serialised when it parses."""
    if isinstance(arguments, str):
        try:
            return json.dumps(json.loads(arguments), ensure_ascii=False)
        except ValueError:
            return arguments
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)


def tool_call_text(name: str, arguments: Any) -> str:
    body = f'{{"name": {json.dumps(name, ensure_ascii=False)}, "arguments": {canonical_arguments(arguments)}}}'
    return f"<tool_call>\n{body}\n</tool_call>"


def assistant_raw_text(content: str, reasoning: str | None, tool_calls: Sequence[tuple[str, Any]]) -> str:
    """The text a model would have sampled for this turn (before reasoning/tool-call parsing)."""
    text = f"<think>\n{reasoning}\n</think>\n\n" if reasoning else ""
    text += content
    calls = "\n".join(tool_call_text(name, args) for name, args in tool_calls)
    if calls:
        text += ("\n" if content else "") + calls
    return text


def _history_tool_calls(message: Mapping[str, Any]) -> list[tuple[str, Any]]:
    calls: list[tuple[str, Any]] = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        calls.append((str(function.get("name", "")), function.get("arguments")))
    return calls


def _message_body(message: Mapping[str, Any]) -> str:
    if message.get("role") == "assistant":
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        return assistant_raw_text(content_text(message.get("content")), reasoning, _history_tool_calls(message))
    return content_text(message.get("content"))


def _segment(role: str, body: str, eot_id: int) -> list[Piece]:
    # Header, body and trailer are tokenised apart so no piece spans a boundary (Rules 1 and 2).
    return [
        (IM_START_ID, "<|im_start|>"),
        *text_pieces(f"{role}\n", eot_id),
        *text_pieces(body, eot_id),
        (eot_id, IM_END),
        *text_pieces("\n", eot_id),
    ]


def generation_prompt(eot_id: int = DEFAULT_EOT_ID) -> list[Piece]:
    return [(IM_START_ID, "<|im_start|>"), *text_pieces("assistant\n", eot_id)]


def prompt_pieces(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any] | None = None,
    eot_id: int = DEFAULT_EOT_ID,
) -> list[Piece]:
    """The rendered prompt, generation prompt included."""
    pieces: list[Piece] = []
    rest = list(messages)
    if tools:
        system = ""
        if rest and rest[0].get("role") == "system":
            system = content_text(rest.pop(0).get("content")) + "\n\n"
        listing = "\n".join(json.dumps(tool, ensure_ascii=False, sort_keys=True) for tool in tools)
        pieces += _segment("system", f"{system}# Tools\n<tools>\n{listing}\n</tools>", eot_id)
    for message in rest:
        pieces += _segment(str(message.get("role", "")), _message_body(message), eot_id)
    return pieces + generation_prompt(eot_id)


def prompt_ids(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any] | None = None,
    eot_id: int = DEFAULT_EOT_ID,
) -> list[int]:
    return [i for i, _ in prompt_pieces(messages, tools, eot_id)]


def sampled_pieces(raw_text: str, *, stopped: bool, eot_id: int = DEFAULT_EOT_ID) -> list[Piece]:
    """Sampled ids for a reply: the raw text, then the end-of-turn id when generation stopped on it."""
    pieces = text_pieces(raw_text, eot_id)
    return [*pieces, (eot_id, IM_END)] if stopped else pieces


def reasoning_token_count(ids: Sequence[int]) -> int:
    """Sampled ids up to and including </think>, as SGLang counts reasoning_tokens."""
    return ids.index(THINK_END_ID) + 1 if THINK_END_ID in ids else 0


def piece_logprob(piece: str, position: int) -> float:
    # Deterministic, strictly negative, distinct enough per position to catch misaligned copies.
    return -round(0.001 + (_stable_hash(f"{position}:{piece}") % 5000) / 1000.0, 4)
