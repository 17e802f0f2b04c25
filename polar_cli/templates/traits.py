"""What a chat template accepts, decided from what it does with small probe conversations, never from a model name.

Each `Probe` is a tiny conversation with one feature real harness traffic has (a system turn after the user turn,
Codex's several leading developer messages, a history without a user message, ...) and unique marker texts, next to
a control conversation without that feature. A template that renders the control but raises on the probe REFUSES
the feature; one that renders the probe without one of its markers DROPS it, silently; one that renders it exactly
as a twin conversation with the marked piece elsewhere MOVES it (DeepSeek hoists a later system message to the top, a
reminder then reads as a rule the earlier turns broke). `detect_traits` renders the
probes with a local `ChatTemplate`; `gateway.probe.probe_traits` sends the same probes to a running server and reads
its 400s and prompt token counts instead. A recipe may also declare the traits (`TemplateTraits.from_mapping`).

What the six real templates in tests/data/chat_templates do (see tests/unit/templates):

    qwen3            drops a developer message
    qwen3.5          refuses a system message that is not messages[0], a developer message, a history without a
                     user message, and tool-call arguments that are not a JSON object
    qwen3.6-unsloth  merges the first two system messages and drops later ones; drops non-object arguments
    nemotron-3-super refuses non-object tool-call arguments
    gpt-oss          renders only messages[0] as the developer message (drops every other system message), renders
                     only the first call of an assistant turn, refuses a tool result without a call before it
    gemma-4          drops a tool result that does not directly follow the call it answers

and the families added for issue 28:

    ministral-3, ministral-3-reasoning   refuse a system message that is not messages[0] and a developer message,
                     and demand that user and (text) assistant turns alternate: two user messages in a row, or a user
                     message right after tool results, is refused
    devstral-small-2507, kimi-k2         drop (devstral) or take (kimi) a developer message; nothing else
    glm-4.6          drops a developer message; refuses non-object tool-call arguments
    deepseek-v3.1    drops a developer message; renders every system message's text at the top, before the turns a
                     later one followed
    minimax-m2       drops later system messages and developer messages, refuses a tool result without its call
                     and non-object arguments
    llama-3.1        refuses an assistant turn with more than one tool call
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import cache
from typing import Any, Literal

from polar_cli.errors import ConfigError
from polar_cli.templates.chat import ChatTemplate, TemplateError

ChatMessage = dict[str, Any]


@dataclass(frozen=True, slots=True)
class TemplateTraits:
    """The rules a chat template enforces; each field names one (all False: the template takes any conversation)."""

    # refuses a system (or developer) message anywhere but messages[0] (qwen3.5)
    single_leading_system: bool = False
    # renders, but the text of a system message other than messages[0] is missing (qwen3.6-unsloth, gpt-oss)
    drops_later_system: bool = False
    # refuses a conversation without a user message (qwen3.5: "No user query found in messages.")
    needs_user_query: bool = False
    # refuses or drops a message with role developer (qwen3.5 refuses, qwen3 drops)
    no_developer_role: bool = False
    # refuses or drops a tool result that does not follow an assistant turn calling it (gpt-oss raises, gemma drops)
    needs_call_before_tool_result: bool = False
    # renders only the first tool call of an assistant turn (gpt-oss)
    one_tool_call_per_message: bool = False
    # refuses or drops tool-call arguments that are not a JSON object (qwen3.5, nemotron refuse; qwen3.6 drops)
    needs_object_arguments: bool = False
    # refuses or drops a user message right after another user message (ministral-3: roles must alternate)
    alternating_roles: bool = False
    # refuses or drops a user message right after tool results, with no assistant text between (ministral-3)
    needs_answer_before_user: bool = False
    # renders a system message that came after the user's turn at the top, before the turns it followed (deepseek)
    hoists_later_system: bool = False

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> TemplateTraits:
        """Traits declared by hand (a recipe's mapping of trait name -> bool); unknown names are a `ConfigError`."""
        known = cls.names()
        unknown = sorted(str(k) for k in values if k not in known)
        if unknown:
            raise ConfigError(f"unknown template trait(s) {', '.join(unknown)}; known: {', '.join(known)}")
        wrong = sorted(str(k) for k, v in values.items() if not isinstance(v, bool))
        if wrong:
            raise ConfigError(f"template trait(s) {', '.join(wrong)}: must be true or false")
        return cls(**dict(values))

    def as_mapping(self) -> dict[str, bool]:
        return {name: getattr(self, name) for name in self.names()}

    @property
    def held(self) -> tuple[str, ...]:
        """The names of the traits that hold."""
        return tuple(name for name in self.names() if getattr(self, name))


TraitName = Literal[
    "single_leading_system",
    "drops_later_system",
    "needs_user_query",
    "no_developer_role",
    "needs_call_before_tool_result",
    "one_tool_call_per_message",
    "needs_object_arguments",
    "alternating_roles",
    "needs_answer_before_user",
    "hoists_later_system",
]


@dataclass(frozen=True, slots=True)
class Probe:
    """A conversation with one feature, its control without it, and the trait each outcome sets."""

    name: str
    messages: tuple[ChatMessage, ...]
    # ``messages`` less the marked piece (for a probe that only tells refusals, plus what ``messages`` lacks)
    control: tuple[ChatMessage, ...]
    # texts of ``messages`` that a template keeping everything renders (a missing one means a drop)
    markers: tuple[str, ...]
    refused: TraitName | None
    dropped: TraitName | None
    # a conversation that puts the marked piece elsewhere: a template rendering ``messages`` exactly as it renders
    # this one MOVES the piece (compared as prompt ids on a server)
    twin: tuple[ChatMessage, ...] = ()
    moved: TraitName | None = None


def _system(text: str) -> ChatMessage:
    return {"role": "system", "content": text}


def _user(text: str) -> ChatMessage:
    return {"role": "user", "content": text}


def _calls(*calls: tuple[str, str, str]) -> ChatMessage:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": name, "arguments": arguments}}
            for i, name, arguments in calls
        ],
    }


def _result(call_id: str, text: str) -> ChatMessage:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


_S, _U = _system("polar-probe-system-0"), _user("polar-probe-user-0")
_CALL = ("call_polar_1", "polar_probe_tool_1", '{"value": "polar-probe-arg-1"}')
_CALL_2 = ("call_polar_2", "polar_probe_tool_2", '{"value": "polar-probe-arg-2"}')


def _arguments_probe(name: str, n: int, arguments: str, markers: tuple[str, ...], dropped: TraitName | None) -> Probe:
    """A tool call whose arguments text is not a JSON object, against the same call with ``{}``: a template that
    parses arguments into an object refuses it (and one that renders the parsed object drops a string's text)."""
    call_id, tool = f"call_polar_{n}", f"polar_probe_tool_{n}"
    return Probe(
        name,
        (_U, _calls((call_id, tool, arguments))),
        (_U, _calls((call_id, tool, "{}"))),
        markers,
        "needs_object_arguments",
        dropped,
    )


PROBES: tuple[Probe, ...] = (
    # Codex: two developer messages lead the conversation; a third, because one template merges only the first two.
    # Each probe adds one piece to its control, so a server's prompt token count shows which piece was dropped.
    Probe(
        "second_system",
        (_S, _system("polar-probe-system-1"), _U),
        (_S, _U),
        ("polar-probe-system-1",),
        "single_leading_system",
        "drops_later_system",
    ),
    Probe(
        "third_system",
        (_S, _system("polar-probe-system-1"), _system("polar-probe-system-2"), _U),
        (_S, _system("polar-probe-system-1"), _U),
        ("polar-probe-system-2",),
        "single_leading_system",
        "drops_later_system",
    ),
    # Claude Code: a system turn right after the user turn
    Probe(
        "system_after_user",
        (_S, _U, _system("polar-probe-system-3")),
        (_S, _U),
        ("polar-probe-system-3",),
        "single_leading_system",
        "drops_later_system",
        (_S, _system("polar-probe-system-3"), _U),
        "hoists_later_system",
    ),
    Probe(
        "no_user",
        (_S, _calls(_CALL), _result(_CALL[0], "polar-probe-result-1")),
        (_S, _U, _calls(_CALL), _result(_CALL[0], "polar-probe-result-1")),
        (),
        "needs_user_query",
        None,
    ),
    Probe(
        "developer",
        ({"role": "developer", "content": "polar-probe-developer-0"}, _U),
        (_U,),
        ("polar-probe-developer-0",),
        "no_developer_role",
        "no_developer_role",
    ),
    Probe(
        "result_without_call",
        (_S, _U, _result("call_polar_9", "polar-probe-result-9")),
        (_S, _U),
        ("polar-probe-result-9",),
        "needs_call_before_tool_result",
        "needs_call_before_tool_result",
    ),
    Probe(
        "parallel_calls",
        (_U, _calls(_CALL, _CALL_2)),
        (_U, _calls(_CALL)),
        ("polar_probe_tool_2", "polar-probe-arg-2"),
        "one_tool_call_per_message",
        "one_tool_call_per_message",
    ),
    _arguments_probe("string_arguments", 3, '"polar-probe-arg-3"', ("polar-probe-arg-3",), "needs_object_arguments"),
    # Codex sends its AGENTS.md, environment and prompt as user messages in a row; Claude Code's system turn after the
    # user's becomes a second user message once made safe
    Probe(
        "consecutive_users",
        (_S, _U, _user("polar-probe-user-1")),
        (_S, _U),
        ("polar-probe-user-1",),
        "alternating_roles",
        "alternating_roles",
    ),
    # a user message after a tool round that ended without an answer (a harness interrupted, a steering message)
    Probe(
        "user_after_tool_result",
        (_S, _U, _calls(_CALL), _result(_CALL[0], "polar-probe-result-1"), _user("polar-probe-user-2")),
        (_S, _U, _calls(_CALL), _result(_CALL[0], "polar-probe-result-1")),
        ("polar-probe-user-2",),
        "needs_answer_before_user",
        "needs_answer_before_user",
    ),
    _arguments_probe("empty_arguments", 4, "", (), None),
)


def detect_traits(template: ChatTemplate) -> TemplateTraits:
    """The traits of ``template``, from rendering `PROBES` (cached per template source and variables).

    A probe whose control does not render decides nothing: its trait stays False.
    """
    return _detect(template.source, tuple(sorted(template.variables.items())))


@cache
def _detect(source: str, variables: tuple[tuple[str, str], ...]) -> TemplateTraits:
    template = ChatTemplate(source, variables=dict(variables))
    held: set[str] = set()
    for probe in PROBES:
        outcome = _outcome(template, probe)
        trait = {"refused": probe.refused, "dropped": probe.dropped, "moved": probe.moved}.get(outcome)
        if trait is not None:
            held.add(trait)
    return TemplateTraits(**{name: True for name in held})


def _outcome(template: ChatTemplate, probe: Probe) -> Literal["kept", "refused", "dropped", "moved", "undecided"]:
    try:
        template.render(probe.control)
    except TemplateError:
        return "undecided"
    try:
        text = template.render(probe.messages)
    except TemplateError:
        return "refused"
    if not all(m in text for m in probe.markers):
        return "dropped"
    if probe.twin and _renders(template, probe.twin) == text:
        return "moved"
    return "kept"


def _renders(template: ChatTemplate, messages: tuple[ChatMessage, ...]) -> str | None:
    try:
        return template.render(messages)
    except TemplateError:
        return None
