"""The template's rendering of a continuation's new messages: from a small window of the history, or from all of it.

A continuation's prompt ends with the template's rendering of its new messages and the generation prompt: the tail
of the whole conversation's rendering after the answer's turn end (`continuation`'s docstring). `full_tail` takes it
from there: it renders the history (ending with the answer) and the history with the new messages, and cuts the
second after as many turn ends as the first has. Exact by construction, but it renders the whole conversation twice,
so a long session pays for its length on every call.

`window_tail` renders the same tail from a window of the history instead: the leading system messages, the last user
message before the answer, and the answer, the new messages following as they do in the conversation. What a real
template writes for a message depends on that message, its neighbours, the tools and kwargs, and whether it comes
after the last user message; a window keeps all of those, so its tail is the conversation's. A template may still
depend on more (count the turns, number the calls, gather system text from anywhere), so the window vouches for its
tail only when these cheap checks hold, and otherwise gives None and the whole conversation is rendered:

1. It drops nothing a template gathers or refuses: no system message past the leading ones.
2. Each new tool result answers a call of the answer: the window holds the call (Gemma 4 matches a result to its
   call by id, gpt-oss names a result after its call).
3. The template renders the window's history alike whether or not the new messages follow: it does not rewrite an
   earlier turn on account of a later one (Qwen3 drops the answer's reasoning once a new user message follows, gpt-oss
   its analysis once a final answer does), the mark of a template that looks across the conversation.
4. The tail is taken from a window that also keeps the round before the answer (the previous assistant turn and its
   results), so that 3 sees an earlier turn; the window without that round must end with the same tail, right after
   a turn end: a template that counts or numbers across the conversation, or reads a dropped round, would differ.

That is three renderings of a handful of messages each, whatever the history's length (1 and 2 read only the
messages' roles and the new results' call ids).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from polar_cli.templates import ChatTemplate
from polar_cli.templates.chat import TemplateError

Messages = Sequence[Mapping[str, Any]]
_SYSTEM_ROLES = ("system", "developer")


@dataclass(frozen=True, slots=True)
class TailRender:
    """What every rendering of one continuation shares: the template, its tools and kwargs, the turn-ending tokens."""

    template: ChatTemplate
    tools: Sequence[Mapping[str, Any]] | None
    kwargs: Mapping[str, Any] | None
    turn_ends: tuple[str, ...]

    def split(self, history: Messages, new: Messages) -> tuple[str, str, int | None]:
        """The history's rendering, the rendering with the new messages, and where the tail starts in the second.

        The tail starts after as many turn ends as the history's rendering has; one more when that rendering does
        not end in one (GLM: the answer's turn has no end token, its sampled stop is the next turn's opener).
        """
        head = self.template.render(history, self.tools, self.kwargs, generation_prompt=False)
        full = self.template.render([*history, *new], self.tools, self.kwargs, generation_prompt=True)
        return head, full, _after_nth_end(full, self.turn_ends, self.ends_through_answer(head))

    def ends_through_answer(self, head: str) -> int:
        ends = sum(head.count(e) for e in self.turn_ends)
        return ends if head.rstrip().endswith(self.turn_ends) else ends + 1

    def rewrites_earlier_turns(self, head: str, full: str) -> bool:
        """Whether the turns before the answer render otherwise once the new messages follow (check 3)."""
        before = _after_nth_end(head, self.turn_ends, self.ends_through_answer(head) - 1)
        return before is None or not full.startswith(head[:before])


def full_tail(render: TailRender, history: Messages, new: Messages) -> str | None:
    """The tail cut from the whole conversation's rendering (None: it has fewer turn ends than the history's)."""
    _, full, at = render.split(history, new)
    return None if at is None else full[at:]


def window_tail(render: TailRender, history: Messages, new: Messages) -> str | None:
    """The tail rendered from a small window of the history, or None where the checks cannot vouch for it."""
    windows = tail_windows(history, new)
    if windows is None:
        return None
    small, large = windows
    try:
        head, full, at = render.split(large, new)
        narrow = render.template.render([*small, *new], render.tools, render.kwargs, generation_prompt=True)
    except TemplateError:  # a window the template refuses: the whole conversation decides
        return None
    if at is None or at == len(full) or render.rewrites_earlier_turns(head, full):
        return None
    tail = full[at:]
    # check 4: the narrower window ends with the same tail, right after a turn end
    same = narrow.endswith(tail) and narrow[: len(narrow) - len(tail)].endswith(render.turn_ends)
    return tail if same else None


def tail_text(render: TailRender, history: Messages, new: Messages) -> str | None:
    """The new messages' rendering and the generation prompt: from the windows where they vouch, else in full."""
    tail = window_tail(render, history, new)
    return tail if tail is not None else full_tail(render, history, new)


def tail_windows(history: Messages, new: Messages) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]] | None:
    """The small window and the one that also keeps the previous round; None where a window would not do.

    None too where the larger window is the whole history: a short conversation is rendered in full anyway.
    """
    answer = history[-1]
    lead = next((i for i, m in enumerate(history) if m.get("role") not in _SYSTEM_ROLES), len(history))
    if any(m.get("role") in _SYSTEM_ROLES for m in history[lead:]):
        return None
    calls = {c.get("id") for c in answer.get("tool_calls") or () if isinstance(c, Mapping)}
    if any(m.get("role") == "tool" and m.get("tool_call_id") not in calls for m in new):
        return None
    last = len(history) - 1
    user = next((i for i in range(last - 1, lead - 1, -1) if history[i].get("role") == "user"), None)
    previous = next((i for i in range(last - 1, lead - 1, -1) if history[i].get("role") == "assistant"), None)
    if previous is None:
        return None
    kept = history[:lead]
    small = [*kept, *([] if user is None else [history[user]]), answer]
    large = [*kept, *([] if user is None or user > previous else [history[user]]), *history[previous:]]
    return None if len(large) == len(history) else (small, large)


def _after_nth_end(text: str, ends: Sequence[str], n: int) -> int | None:
    pos = 0
    for _ in range(n):
        found = [(i, e) for e in ends if (i := text.find(e, pos)) >= 0]
        if not found:
            return None
        i, e = min(found)
        pos = i + len(e)
    return pos
