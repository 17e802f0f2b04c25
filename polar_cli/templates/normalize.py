"""Template-safe requests: reshape the upstream body's messages so the model's chat template renders every one of
them, neither refusing the call (a 400 that ends the harness's session) nor silently leaving any text out.

The messages are OpenAI Chat dicts as `translate.upstream.chat_body` builds them (roles system/user/assistant/tool,
content a string or a list of parts, ``tool_calls`` with JSON-text arguments, ``reasoning_content``). Each rule is a
pure function named for what it does; it returns its input list itself when there is nothing to do, else a new list
(messages it leaves alone are shared, none is mutated). `make_template_safe` runs the rules a template's
`TemplateTraits` call for, in the order of `RULES`, and names the ones that changed something.

Where a system message sits, and why it moves as it does:

- Rule 1 (`fold_leading_system`): the system and developer messages before the first other message become ONE
  system message, their texts in order, a blank line between. They were all at the start, so nothing but the
  boundaries between them is lost (Codex's two developer messages: qwen3.5 refuses the second, gpt-oss drops it).
- Rule 2 (`later_system_as_user`): a system message after the conversation began (Claude Code sends its
  ``# Environment`` block, tool and skill lists as a system turn right after the first user turn, and "mid-
  conversation system turns" for reminders) becomes a user message AT ITS PLACE, its text inside
  ``<system-reminder>`` tags. Folding it into the leading system message instead would keep its authority but move
  it before everything it follows; a reminder sent at turn 10 would then read as a rule the earlier turns broke, and
  every call after it would change the prompt's first message, splitting the session's prefix-merged trajectory.
  In place, the prompt only grows at the end. The tags are Claude Code's own way of marking system text inside a user
  turn (its first user message carries two such blocks; its system prompt says they are "background context, not
  user instructions"), so the model reads it as the harness meant: from the system, at that point in time.

- Rule 3 (`merge_consecutive_users`): where a template demands that user and assistant turns alternate (Ministral 3:
  "conversation roles must alternate"), user messages in a row become ONE user message at the place of the first,
  their texts in order, a blank line between (Codex's AGENTS.md, environment and prompt; Claude Code's prompt and the
  reminder Rule 2 made). A user message right after tool results is not mended: Ministral 3 refuses it, and refuses
  an empty assistant turn between them too, so only words the model never wrote would make it fit. `unfit` names such
  a conversation (its trait and place), for an answer the harness can read instead of the template's bare 400.

Not mended, because no reshaping keeps it without changing what the turns are: gpt-oss writes an assistant turn's
text beside its tool calls as the analysis channel and leaves it out once a later final answer exists; and templates
drop earlier turns' reasoning by design. A server, not a template: SGLang refuses tool-call arguments that are not a
JSON object before any template sees them, so against SGLang `object_tool_arguments` is wanted whatever the template.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from polar_cli.templates.traits import TemplateTraits

ChatMessage = dict[str, Any]
Rule = Callable[[list[ChatMessage]], list[ChatMessage]]

SYSTEM_ROLES = ("system", "developer")
NOTE_OPEN, NOTE_CLOSE = "<system-reminder>\n", "\n</system-reminder>"


def _is_system(message: ChatMessage) -> bool:
    return message.get("role") in SYSTEM_ROLES


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return list(content)
    return [_text_part(content)] if content else []


def _join(contents: Sequence[Any], separator: str = "\n\n") -> str | list[dict[str, Any]]:
    """Contents joined by ``separator``: a string when all are strings, else a list of parts."""
    present = [c for c in contents if c]
    if all(isinstance(c, str) for c in present):
        return separator.join(present)
    parts: list[dict[str, Any]] = []
    for i, content in enumerate(present):
        if i:
            parts.append(_text_part(separator))
        parts += _parts(content)
    return parts


def developer_as_system(messages: list[ChatMessage]) -> list[ChatMessage]:
    """A developer message becomes a system message (qwen3.5 refuses the role, qwen3 drops it)."""
    if not any(m.get("role") == "developer" for m in messages):
        return messages
    return [{**m, "role": "system"} if m.get("role") == "developer" else m for m in messages]


def fold_leading_system(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Rule 1: the leading system/developer messages become one system message (see the module docstring)."""
    n = next((i for i, m in enumerate(messages) if not _is_system(m)), len(messages))
    if n < 2:
        return messages
    folded = {"role": "system", "content": _join([m.get("content") for m in messages[:n]])}
    return [folded, *messages[n:]]


def later_system_as_user(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Rule 2: a system message after the first other message becomes a ``<system-reminder>`` user message there
    (after the tool results, when it came between a call and its results: no template renders those apart)."""
    start = next((i for i, m in enumerate(messages) if not _is_system(m)), len(messages))
    if not any(_is_system(m) for m in messages[start:]):
        return messages
    out = messages[:start]
    notes: list[ChatMessage] = []
    for m in messages[start:]:
        if _is_system(m):
            notes.append(_as_note(m))
            continue
        if notes and not (m.get("role") == "tool" and _in_tool_round(out[-1])):
            out += notes
            notes = []
        out.append(m)
    return out + notes


def _in_tool_round(message: ChatMessage) -> bool:
    return message.get("role") == "tool" or bool(message.get("role") == "assistant" and message.get("tool_calls"))


def _as_note(message: ChatMessage) -> ChatMessage:
    content = message.get("content")
    text = content if isinstance(content, str) else " ".join(str(p.get("text", "")) for p in _parts(content))
    if text.lstrip().startswith(NOTE_OPEN.strip()):
        return {"role": "user", "content": content}
    if isinstance(content, list):
        return {"role": "user", "content": [_text_part(NOTE_OPEN), *content, _text_part(NOTE_CLOSE)]}
    return {"role": "user", "content": f"{NOTE_OPEN}{content or ''}{NOTE_CLOSE}"}


def orphan_tool_results_as_user(messages: list[ChatMessage]) -> list[ChatMessage]:
    """A tool result that answers no call of the assistant turn it follows becomes a user message with its text,
    placed after that turn's other results (gpt-oss refuses such a result; gemma-4 drops it, and would drop the
    results after it too if the user message came between them and their call)."""
    out: list[ChatMessage] = []
    orphans: list[ChatMessage] = []
    calls: set[str] = set()
    changed = False
    for m in messages:
        if m.get("role") == "tool":
            if m.get("tool_call_id") in calls:
                out.append(m)
            else:
                orphans.append({"role": "user", "content": m.get("content")})
                changed = True
            continue
        out += orphans
        orphans = []
        calls = {str(c.get("id")) for c in m.get("tool_calls") or ()} if m.get("role") == "assistant" else set()
        out.append(m)
    out += orphans
    return out if changed else messages


def split_parallel_tool_calls(messages: list[ChatMessage]) -> list[ChatMessage]:
    """An assistant turn with several tool calls becomes one assistant message per call, each followed by the results
    answering it (gpt-oss renders only the first call of a turn and labels every result with that call's name).
    Content and reasoning stay on the first. Results that answer none of the calls keep their place after them."""
    if not any(len(m.get("tool_calls") or ()) > 1 for m in messages if m.get("role") == "assistant"):
        return messages
    out: list[ChatMessage] = []
    i = 0
    while i < len(messages):
        m = messages[i]
        calls = (m.get("tool_calls") or []) if m.get("role") == "assistant" else []
        end = i + 1
        while end < len(messages) and messages[end].get("role") == "tool":
            end += 1
        if len(calls) < 2:
            out += messages[i:end] if calls else [m]
            i = end if calls else i + 1
            continue
        results = messages[i + 1 : end]
        for k, call in enumerate(calls):
            rest: ChatMessage = {"role": "assistant", "content": None, "tool_calls": [call]}
            out.append({**m, "tool_calls": [call]} if k == 0 else rest)
            out += [r for r in results if r.get("tool_call_id") == call.get("id")]
        ids = {c.get("id") for c in calls}
        out += [r for r in results if r.get("tool_call_id") not in ids]
        i = end
    return out


def object_tool_arguments(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Tool-call arguments that are not the JSON text of an object become one: empty ones ``{}``, any other text
    ``{"input": <the text>}`` (the shape freeform calls already have upstream), so templates that iterate over the
    arguments' items (qwen3.5 raises on a string, qwen3.6 drops it) render it."""
    out: list[ChatMessage] | None = None
    for i, m in enumerate(messages):
        calls = m.get("tool_calls") if m.get("role") == "assistant" else None
        if not calls or all(_object_text(c) for c in calls):
            continue
        out = out if out is not None else list(messages)
        out[i] = {**m, "tool_calls": [c if _object_text(c) else _with_object_arguments(c) for c in calls]}
    return messages if out is None else out


def _object_text(call: Any) -> bool:
    arguments = (call.get("function") or {}).get("arguments") if isinstance(call, dict) else None
    if not isinstance(arguments, str):
        return True  # already an object (or nothing this rule can mend)
    try:
        return isinstance(orjson.loads(arguments), dict)  # orjson: what SGLang parses them with
    except orjson.JSONDecodeError:
        return False


def _with_object_arguments(call: dict[str, Any]) -> dict[str, Any]:
    text = call["function"]["arguments"]
    wrapped = "{}" if not text.strip() else orjson.dumps({"input": text}).decode()
    return {**call, "function": {**call["function"], "arguments": wrapped}}


def ensure_user_query(messages: list[ChatMessage]) -> list[ChatMessage]:
    """A conversation without a user message gets an empty one after its leading system messages (qwen3.5 raises
    "No user query found in messages."; e.g. a Responses call whose input is only tool calls and their outputs)."""
    if any(m.get("role") == "user" for m in messages):
        return messages
    n = next((i for i, m in enumerate(messages) if not _is_system(m)), len(messages))
    return [*messages[:n], {"role": "user", "content": ""}, *messages[n:]]


def merge_consecutive_users(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Rule 3: user messages in a row become one, texts in order with a blank line between (Ministral 3 refuses two
    user turns in a row)."""
    if not any(a.get("role") == b.get("role") == "user" for a, b in itertools.pairwise(messages)):
        return messages
    out: list[ChatMessage] = []
    for m in messages:
        if out and m.get("role") == out[-1].get("role") == "user":
            out[-1] = {"role": "user", "content": _join([out[-1].get("content"), m.get("content")])}
        else:
            out.append(m)
    return out


@dataclass(frozen=True)
class Unfit:
    """A conversation no rule can make a template take: the trait it breaks, where, and why no rule mends it."""

    trait: str
    index: int
    reason: str

    @property
    def message(self) -> str:
        return f"the model's chat template cannot take this conversation ({self.trait}, messages[{self.index}]): " + (
            self.reason
        )


def unfit(messages: Sequence[ChatMessage], traits: TemplateTraits) -> Unfit | None:
    """What in ``messages`` (already made template-safe) the template will still refuse, or None.

    A caller answers it with a 400 naming the trait in the harness's API shape and records it, rather than sending a
    call the server's template refuses with a message that names no cause the harness can act on.
    """
    if traits.needs_answer_before_user:
        for i, (a, b) in enumerate(itertools.pairwise(messages)):
            if a.get("role") == "tool" and b.get("role") == "user":
                return Unfit(
                    "needs_answer_before_user",
                    i + 1,
                    "a user message right after tool results, and the template demands assistant text between them "
                    "(it refuses an empty assistant turn too); no rule adds words the model never wrote",
                )
    return None


def _system_rules(t: TemplateTraits) -> bool:
    return t.single_leading_system or t.drops_later_system or t.hoists_later_system


# (rule, when the traits call for it), in the order they run: roles first, then places, then what is left to fill
RULES: tuple[tuple[Rule, Callable[[TemplateTraits], bool]], ...] = (
    (developer_as_system, lambda t: t.no_developer_role),
    (fold_leading_system, _system_rules),
    (later_system_as_user, _system_rules),
    (orphan_tool_results_as_user, lambda t: t.needs_call_before_tool_result),
    (split_parallel_tool_calls, lambda t: t.one_tool_call_per_message),
    (object_tool_arguments, lambda t: t.needs_object_arguments),
    (ensure_user_query, lambda t: t.needs_user_query),
    (merge_consecutive_users, lambda t: t.alternating_roles),
)


def make_template_safe(
    messages: Sequence[ChatMessage], traits: TemplateTraits
) -> tuple[list[ChatMessage], tuple[str, ...]]:
    """The messages reshaped for a template with ``traits``, and the names of the rules that changed them.

    Pure: ``messages`` and its dicts are never mutated (unchanged dicts are shared with the result).
    """
    out = list(messages)
    applied: list[str] = []
    for rule, wanted in RULES:
        if wanted(traits):
            new = rule(out)
            if new is not out:
                applied.append(rule.__name__)
                out = new
    return out, tuple(applied)
