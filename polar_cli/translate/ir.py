"""The typed internal representation every provider API is decoded into and encoded from.

Mental model: a harness request in any of the four provider APIs becomes one `ChatRequest`; the gateway sends it to
the inference server as an OpenAI Chat Completions call (see `translate/upstream.py`), and the answer comes back as one
`Completion`, which the provider module encodes in the harness's own shape (a JSON body or a synthetic SSE stream).

The IR follows OpenAI Chat's model of a conversation, because that is what the upstream speaks: roles are
system/user/assistant/tool, assistant turns carry tool calls, and each tool result is its own `tool` message.

Every class is a value: never changed once built. Most are frozen dataclasses; the four a request's history is made
of (`Text`, `Image`, `ToolCall`, `Message`) are plain slotted ones (hashable all the same): a decoder builds a hundred
of them per call from a long history, and a frozen dataclass's ``__init__`` (one ``object.__setattr__`` per field)
costs about three times as much.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]
FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "abort"]
ToolKind = Literal["function", "custom"]
JsonObject = Mapping[str, Any]


@dataclass(slots=True, unsafe_hash=True)
class Text:
    text: str


@dataclass(slots=True, unsafe_hash=True)
class Image:
    """An image input: an http(s) URL or a ``data:<media type>;base64,...`` URL."""

    url: str


Part = Text | Image


@dataclass(slots=True, unsafe_hash=True)
class ToolCall:
    """A call the model made.

    ``arguments`` is the JSON text of the arguments object (OpenAI's convention), exactly as the model produced it.
    For a ``custom`` (freeform) tool the upstream saw a function with one string parameter ``input``, so
    ``arguments`` is ``{"input": "..."}``; `custom_input` unwraps it for APIs that carry freeform input natively.
    """

    id: str
    name: str
    arguments: str
    kind: ToolKind = "function"


@dataclass(slots=True, unsafe_hash=True)
class Message:
    role: Role
    content: tuple[Part, ...] = ()
    # assistant only: the model's reasoning / thinking text, when the API carries it back in the history.
    reasoning: str | None = None
    # assistant only.
    tool_calls: tuple[ToolCall, ...] = ()
    # tool only: which call this result answers, and (when the API says) the tool's name.
    tool_call_id: str | None = None
    name: str | None = None
    # tool only: the harness marked the result as an error (Anthropic ``is_error``).
    is_error: bool = False

    @property
    def text(self) -> str:
        """All text parts joined, images left out."""
        return "".join([p.text for p in self.content if isinstance(p, Text)])  # a list: join's fast path


@dataclass(frozen=True, slots=True)
class Namespaced:
    """Where a flattened tool came from: the tool ``name`` inside the harness's ``namespace`` group.

    OpenAI Responses groups tools (``{"type": "namespace", "name", "tools": [...]}``; Codex's multi-agent tools and
    its MCP servers' tools). The upstream knows only flat functions, so the IR tool gets a flat, unique name and this
    remembers the pair the harness must see again on the model's call.
    """

    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the harness offers.

    ``kind == "custom"`` is a freeform tool (Codex's ``apply_patch``): its input is raw text, not JSON. Upstream it is
    offered as a function with a single string parameter ``input``; ``parameters`` then holds that wrapper schema and
    ``description`` carries the tool's grammar or format note. ``namespaced`` is set when ``name`` is the flat name
    of a tool the harness offered inside a namespace group.
    """

    name: str
    description: str = ""
    parameters: JsonObject = field(default_factory=lambda: {"type": "object", "properties": {}})
    kind: ToolKind = "function"
    namespaced: Namespaced | None = None


@dataclass(frozen=True, slots=True)
class ToolChoice:
    mode: Literal["auto", "none", "required", "tool"]
    # mode == "tool": the one tool the model must call.
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Sampling:
    """Generation parameters under their OpenAI Chat names; ``None`` means "not sent, use the server's default"."""

    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def numbers(self) -> dict[str, float]:
        """The numeric settings that are set, in field order, under their own (OpenAI Chat) names: what an OpenAI
        Chat body carries as they are (``stop`` aside, a list there)."""
        return {name: value for name in _SAMPLING_NUMBERS if (value := getattr(self, name)) is not None}


_SAMPLING_NUMBERS = tuple(f.name for f in fields(Sampling) if f.name != "stop")


@dataclass(frozen=True, slots=True)
class Reasoning:
    """What the harness asked of the model's thinking.

    ``enabled`` is False when the harness turned thinking off explicitly, True when it asked for it, None when it said
    nothing. ``effort`` uses OpenAI's words (minimal/low/medium/high); ``budget_tokens`` is Anthropic's budget.
    """

    enabled: bool | None = None
    effort: str | None = None
    budget_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """JSON mode. ``schema`` is set for ``json_schema`` (Gemini ``responseJsonSchema``/``responseSchema``)."""

    type: Literal["json_object", "json_schema"]
    schema: JsonObject | None = None
    name: str = "response"


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str
    messages: tuple[Message, ...]
    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    sampling: Sampling = Sampling()
    reasoning: Reasoning | None = None
    response_format: ResponseFormat | None = None
    # The harness asked for a stream; the upstream call is non-streaming regardless.
    stream: bool = False
    # OpenAI Chat ``stream_options.include_usage``: send a final usage chunk.
    include_usage: bool = False

    def tool(self, name: str) -> Tool | None:
        """The offered tool of that name, if any."""
        for t in self.tools:
            if t.name == name:
                return t
        return None


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    # part of completion_tokens that was reasoning, when the server split it out.
    reasoning_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True, slots=True)
class Completion:
    """The model's answer to one call, already parsed by the server into text, reasoning and tool calls.

    ``id`` is assigned by the gateway and unique across the gateway's lifetime; tool-call ids in ``tool_calls`` are
    unique across a session's turns (the gateway rewrites whatever the server produced).
    """

    id: str
    model: str
    created: int
    text: str
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: FinishReason
    usage: Usage


def custom_input(call: ToolCall) -> str:
    """The raw text input of a freeform (custom) tool call, unwrapped from the ``{"input": ...}`` upstream shape.

    A model that produced something other than the wrapper object gets its raw arguments text passed through, so the
    harness sees what was sampled rather than an error of ours.
    """
    import orjson

    try:
        value = orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        return call.arguments
    if isinstance(value, dict) and isinstance(value.get("input"), str):
        return str(value["input"])
    return call.arguments


def custom_tool_parameters() -> dict[str, Any]:
    """The function schema a freeform tool is offered under upstream."""
    return {
        "type": "object",
        "properties": {"input": {"type": "string", "description": "The raw input of this freeform tool."}},
        "required": ["input"],
        "additionalProperties": False,
    }


def with_grammar(description: str, syntax: str, definition: str) -> str:
    """A freeform tool's description with its grammar spelled out (Codex's ``apply_patch`` lark grammar).

    Upstream the tool is a JSON function with one string parameter ``input``, so the grammar would otherwise never
    reach the model and it would not know what shape of input to write.
    """
    note = (
        f"Pass this tool's raw text as the string argument `input`; that text must match this {syntax} grammar:\n"
        f"```{syntax}\n{definition.rstrip()}\n```"
    )
    return f"{description}\n\n{note}" if description else note
