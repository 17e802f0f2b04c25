"""A session as the text a judge reads: its conversations, tool outputs included, each message capped, cut in chunks.

Source: the trajectories' messages (`Trace.messages`, the OpenAI chat view of what each call saw and sampled). Each
trace is one conversation; a trace whose messages begin with messages already shown (a continuation, the turns a
compaction kept) shows only what is new, and one that is no continuation (a sub-agent, a side call) is headed
``=== conversation N ===``. A session without a trace (no call was trainable) falls back to its
capture records: the last ok call's request messages and its answer.

Rules (docs/judge.md "Transcript"):

1. One block per message: ``[role]`` then its text; an assistant's tool calls as ``-> call NAME(ARGS)``; a tool
   result as ``[tool NAME]``. System messages are left out unless asked for.
2. A tool result longer than ``tool_output_chars``, or any other message text longer than ``message_chars``, keeps
   its head and tail and says how many characters were cut between them.
3. Chunks pack whole blocks in order up to ``chunk_chars``; the task (the first user message, capped) is repeated
   at the head of every chunk, so each can be scored on its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polar_cli.capture import CaptureRecord
from polar_cli.gateway.continuation import content_text
from polar_cli.judge.config import JudgeConfig
from polar_cli.trajectory import Trace


@dataclass(frozen=True, slots=True)
class Caps:
    tool_output_chars: int
    message_chars: int
    include_system: bool = False

    @classmethod
    def of(cls, config: JudgeConfig) -> Caps:
        """The caps a recipe's ``judge:`` section sets."""
        return cls(config.tool_output_chars, config.message_chars, config.include_system)


@dataclass(frozen=True, slots=True)
class Transcript:
    task: str
    blocks: tuple[str, ...]

    @property
    def chars(self) -> int:
        return sum(len(b) for b in self.blocks)


def cut(text: str, cap: int) -> str:
    """``text`` within ``cap`` characters plus a marker: its head and tail, the middle's size named."""
    if len(text) <= cap:
        return text
    head = cap * 2 // 3
    tail = cap - head
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[len(text) - tail :]}"


def text_of(content: Any) -> str:
    """A message's content as text: a string, or the text of its parts, one a line (other parts named by their type).

    Only a list of parts reads otherwise than the gateway reads it (`content_text`): the judge is shown that an image
    was there, and where one part ends.
    """
    if isinstance(content, list):
        return "\n".join(_part_text(part) for part in content)
    return content_text(content)


def _part_text(part: Any) -> str:
    """A content part's text; a part without text (an image, say) as ``<its type>``."""
    if isinstance(part, dict):
        text = part.get("text")
        return text if isinstance(text, str) else f"<{part.get('type', 'part')}>"
    return str(part)


def render(message: dict[str, Any], caps: Caps) -> str | None:
    """One message as a block (Rules 1, 2); None for a system message left out."""
    role = str(message.get("role") or "unknown")
    if role in ("system", "developer") and not caps.include_system:
        return None
    text = text_of(message.get("content"))
    if role == "tool":
        name = message.get("name") or message.get("tool_call_id") or ""
        return f"[tool {name}]\n{cut(text, caps.tool_output_chars)}"
    lines = [f"[{role}]"]
    if text:
        lines.append(cut(text, caps.message_chars))
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            args = function.get("arguments")
            args_text = args if isinstance(args, str) else text_of(args)
            lines.append(f"-> call {function.get('name')}({cut(args_text, caps.message_chars)})")
    return "\n".join(lines)


def conversations(traces: Sequence[Trace], records: Sequence[CaptureRecord]) -> list[tuple[list[dict[str, Any]], bool]]:
    """The session's conversations, each without the messages an earlier one already showed at its start, and
    whether it continues one (it began with all of an earlier conversation's messages)."""
    shown: list[list[dict[str, Any]]] = []
    out: list[tuple[list[dict[str, Any]], bool]] = []
    for trace in traces:
        messages = trace.messages
        prefixes = [(_common_prefix(messages, earlier), len(earlier)) for earlier in shown]
        skip = max((n for n, _ in prefixes), default=0)
        shown.append(messages)
        if messages[skip:]:
            out.append((messages[skip:], any(n == size > 0 for n, size in prefixes)))
    if out or not records:
        return out
    ok = [r for r in records if r.status == "ok" and isinstance(r.normalized, Mapping)]
    if not ok:
        return []
    last = ok[-1]
    messages = list((last.normalized or {}).get("messages") or [])
    choices = (last.response or {}).get("choices") or []
    if choices and isinstance(choices[0], dict) and isinstance(choices[0].get("message"), dict):
        messages.append(choices[0]["message"])
    return [(messages, False)]


def _common_prefix(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def build_transcript(traces: Sequence[Trace], records: Sequence[CaptureRecord], caps: Caps) -> Transcript:
    """The session as a judge reads it (Rules 1, 2)."""
    convs = conversations(traces, records)
    task = ""
    for messages, _ in convs:
        first_user = next((m for m in messages if m.get("role") == "user"), None)
        if first_user is not None:
            task = cut(text_of(first_user.get("content")), caps.message_chars)
            break
    blocks: list[str] = []
    number = 0
    for messages, continues in convs:
        if not continues:
            number += 1
            if number > 1:  # a sub-agent, a side call, a compacted history: a conversation of its own
                blocks.append(f"=== conversation {number} ===")
        blocks.extend(b for b in (render(m, caps) for m in messages) if b is not None)
    return Transcript(task, tuple(blocks))


def chunks(transcript: Transcript, chunk_chars: int) -> list[str]:
    """The transcript's blocks packed in order into chunks of at most ``chunk_chars`` characters (Rule 3; a block
    longer than that alone is cut to fit). An empty transcript is one empty chunk: the judge still scores it."""
    out: list[str] = []
    current: list[str] = []
    size = 0
    for block in transcript.blocks:
        block = cut(block, chunk_chars - 64) if len(block) > chunk_chars else block
        if current and size + len(block) + 2 > chunk_chars:
            out.append("\n\n".join(current))
            current, size = [], 0
        current.append(block)
        size += len(block) + 2
    if current or not out:
        out.append("\n\n".join(current))
    return out
