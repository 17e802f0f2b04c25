"""Token-in mode: a call that continues an earlier call of its session is sent as exact token ids.

An agent harness re-sends the whole history on every call. Rendering it again through the chat template does not
give back what the model saw and sampled: templates drop or rewrite earlier turns (Qwen3 drops think blocks, Qwen3.5
renders an empty one where the model wrote none, tool-call JSON is re-serialised). So when call k+1's messages are
call k's messages, then call k's answer, then new messages, its prompt is

    prompt(k+1) = prompt_ids(k) + sampled_ids(k) + ids(template rendering of only the new messages + generation prompt)

which is exactly the context the model would have had, had it never stopped. The rendering of the new messages is
the tail of the template's rendering of the whole conversation after the end of call k's answer: the answer's turn
ends where the rendering of the history up to and including it has its last turn-ending token (``<|im_end|>``;
gpt-oss ``<|end|>``/``<|call|>``/``<|return|>``), so the tail starts after the same number of turn ends in the full
rendering. Splitting right after a special token keeps the tokenisation of the tail what it is in the full prompt.
Rendering the whole conversation on every call would cost what the history is long; `tail` renders the tail from a
small window of the history where its checks vouch for the same text, and from the whole conversation otherwise.

What counts as "continues" (`find_continuation`): the same tools and template kwargs; every earlier message equal
(text, tool calls by name and arguments as parsed JSON, tool results); the next message is call k's answer (its
text, its tool calls by name and parsed arguments; reasoning, when the harness sends any, as sampled); at least one
new message after it; and call k's sampled ids end with a turn end (a cut answer is no turn the template closes).
Anything else (compaction, an edited history, a side request, a retry) is rendered normally, with the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson

from polar_cli.errors import PolarError
from polar_cli.gateway.tail import TailRender, tail_text
from polar_cli.templates import ChatTemplate, Vocab
from polar_cli.translate.dialects import Dialect
from polar_cli.translate.token_in import refusal


@dataclass(frozen=True, slots=True)
class SampledTurn:
    """One answered call of a session: what was sent, and what the model saw and sampled."""

    messages: tuple[Mapping[str, Any], ...]  # the upstream messages, as sent
    context: bytes  # tools + template kwargs, serialised: a continuation must share them
    answer: Mapping[str, Any]  # the assistant message the harness will send back (content, reasoning, tool calls)
    prompt_ids: Sequence[int]  # kept as array('i'): a session holds several long prompts
    sampled_ids: Sequence[int]


@dataclass(frozen=True, slots=True)
class Continuation:
    turn: SampledTurn
    # the harness's copy of the answer: rendered as the history's last turn (its tool-call ids are the ones the new
    # tool results name, which templates such as Gemma 4's match results by), with the sampled reasoning
    answer: Mapping[str, Any]
    new: tuple[Mapping[str, Any], ...]


def call_context(body: Mapping[str, Any]) -> bytes:
    """What a continuation must share with the call it continues: tools, tool choice and template kwargs."""
    return orjson.dumps(
        [body.get("tools"), body.get("tool_choice"), body.get("chat_template_kwargs")], option=orjson.OPT_SORT_KEYS
    )


def find_continuation(
    turns: Sequence[SampledTurn], body: Mapping[str, Any], turn_end_ids: frozenset[int]
) -> Continuation | str:
    """The latest earlier call that this call continues (longest history first), or why none does."""
    messages = body.get("messages") or []
    context = call_context(body)
    reason = "first call of the session"
    for turn in sorted(turns, key=lambda t: len(t.messages), reverse=True):
        k = len(turn.messages)
        if turn.context != context:
            reason = "tools or template settings changed"
            continue
        if len(messages) <= k + 1:
            reason = "no new message after the previous answer" if len(messages) == k + 1 else "history is shorter"
            continue
        edited = first_difference(messages, turn.messages)
        if edited is not None:
            reason = f"history differs at message {edited}"
            continue
        if not same_answer(messages[k], turn.answer):
            reason = f"message {k} is not the previous answer"
            continue
        if not turn.sampled_ids or turn.sampled_ids[-1] not in turn_end_ids:
            reason = "the previous answer did not end its turn (cut at max tokens or a stop string)"
            continue
        answer = dict(messages[k])
        if turn.answer.get("reasoning_content"):
            answer["reasoning_content"] = turn.answer["reasoning_content"]
        return Continuation(turn, answer, tuple(messages[k + 1 :]))
    return reason


def content_text(content: Any) -> str:
    """A message's text: its string content, or its parts' texts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) if isinstance(p, Mapping) else str(p) for p in content)
    return str(content)


def parsed_arguments(raw: Any) -> Any:
    """Tool-call arguments as JSON (the wire's string parsed), or as they are when they do not parse."""
    if isinstance(raw, str):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
    return raw


def _calls(message: Mapping[str, Any]) -> list[tuple[str, Any]]:
    out = []
    for call in message.get("tool_calls") or ():
        fn = call.get("function") if isinstance(call, Mapping) else None
        fn = fn if isinstance(fn, Mapping) else {}
        out.append((str(fn.get("name") or ""), parsed_arguments(fn.get("arguments"))))
    return out


def first_difference(messages: Sequence[Mapping[str, Any]], earlier: Sequence[Mapping[str, Any]]) -> int | None:
    """The first of ``earlier``'s messages that ``messages`` does not repeat (`same_message`); None: it repeats all.

    Equal dicts are the same message: a history sent again as it was compares in one C-level pass.
    """
    k = len(earlier)
    if list(messages[:k]) == list(earlier):
        return None
    return next((i for i in range(k) if not same_message(messages[i], earlier[i])), None)


def same_message(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal as the template sees them: role, text, tool calls (parsed arguments), tool result id, reasoning."""
    if a is b:
        return True
    return (
        a.get("role") == b.get("role")
        and content_text(a.get("content")) == content_text(b.get("content"))
        and _calls(a) == _calls(b)
        and a.get("tool_call_id") == b.get("tool_call_id")
        and (a.get("reasoning_content") or None) == (b.get("reasoning_content") or None)
    )


def same_answer(sent: Mapping[str, Any], answer: Mapping[str, Any]) -> bool:
    """The harness's copy of an answer: the same text and calls; reasoning, if it sends any, as sampled.

    Text and reasoning compare without their outer whitespace: harnesses trim what they echo (Qwen Code sends the
    reasoning back without the newlines the parser left around it). The ids are the sampled ones either way.
    """
    if sent.get("role") != "assistant":
        return False
    reasoning = content_text(sent.get("reasoning_content")).strip()
    return (
        content_text(sent.get("content")).strip() == content_text(answer.get("content")).strip()
        and _calls(sent) == _calls(answer)
        and (not reasoning or reasoning == content_text(answer.get("reasoning_content")).strip())
    )


def answer_message(text: str, reasoning: str | None, tool_calls: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The assistant message of an answer, in the upstream body's form."""
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    if reasoning:
        out["reasoning_content"] = reasoning
    if tool_calls:
        out["tool_calls"] = list(tool_calls)
    return out


def suffix_text(
    template: ChatTemplate,
    history: Sequence[Mapping[str, Any]],
    new: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None,
    kwargs: Mapping[str, Any] | None,
    turn_ends: Sequence[str],
) -> str | None:
    """The template's rendering of ``new`` and the generation prompt, after ``history`` (ending with the answer).

    Rendered from a small window of the history where the window vouches for it, else from the whole conversation
    (`tail`). None when the full rendering has fewer turn ends than the history's (the template rewrote the history).
    """
    return tail_text(TailRender(template, tools, kwargs, tuple(turn_ends)), history, new)


def continuation_prompt(
    continuation: Continuation,
    template: ChatTemplate,
    vocab: Vocab,
    body: Mapping[str, Any],
    turn_ends: Sequence[str],
) -> list[int] | None:
    """prompt ids + sampled ids of the call continued + the ids of the new messages' rendering (None: cannot)."""
    turn = continuation.turn
    suffix = suffix_text(
        template,
        [*turn.messages, continuation.answer],
        continuation.new,
        body.get("tools") if body.get("tool_choice") != "none" else None,
        body.get("chat_template_kwargs"),
        turn_ends,
    )
    if suffix is None:
        return None
    return [*turn.prompt_ids, *turn.sampled_ids, *vocab.encode(suffix)]


@dataclass(frozen=True)
class TokenIn:
    """What token-in mode needs: the model's own template and vocabulary (the files its server loads)."""

    template: ChatTemplate
    vocab: Vocab
    # the tokens that end a turn in a rendered history (the first ends every sampled turn)
    turn_ends: tuple[str, ...]

    @cached_property
    def turn_end_ids(self) -> frozenset[int]:
        ids = (self.vocab.token_id(t) for t in self.turn_ends)
        return frozenset(i for i in ids if i is not None)


def token_in_prompt(
    turns: Sequence[SampledTurn], body: Mapping[str, Any], token_in: TokenIn, dialect: Dialect
) -> list[int] | str:
    """The exact prompt ids of a call that continues one of ``turns``, or why it goes to the server to render.

    Pure and CPU-bound (comparing the history, rendering it): the gateway runs it off its event loop.
    """
    found = find_continuation(turns, body, token_in.turn_end_ids)
    if not isinstance(found, Continuation):
        return found
    refused = refusal(dialect, body)
    if refused is not None:
        return refused
    try:
        ids = continuation_prompt(found, token_in.template, token_in.vocab, body, token_in.turn_ends)
    except PolarError as exc:  # the template refused: the server renders it and answers as it does
        return f"template: {exc}"
    return ids if ids is not None else "the template rewrote the history (turn ends differ)"
