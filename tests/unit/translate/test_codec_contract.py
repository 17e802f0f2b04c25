"""The contract every codec keeps, checked the same way on all four, each against its own recorded harness traffic.

`Codec` promises that ``decode_request`` turns any JSON into a `ChatRequest` or refuses it with a `RequestError`
naming the offending field, never another exception, and that the encoders turn any answer into JSON bodies and
complete frames in the API's own framing. The ``contract`` fixture pairs each codec with its recordings
(tests/data/harness_requests), the route its recorded paths pick, its field names and body shapes for the fuzzers,
and the caller's SDK types its output must validate against. Codec-specific behaviour lives in each codec's own tests.
"""

from __future__ import annotations

import copy
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import anthropic.types
import openai.types.chat
import openai.types.responses
import orjson
import pydantic
import pytest
from google.genai import types as genai_types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polar_cli.errors import ErrorKind, PolarError, RequestError
from polar_cli.translate import ir
from polar_cli.translate.codec import Codec, Route
from polar_cli.translate.google_genai_fields import camel
from polar_cli.translate.registry import CODECS, route_for_path
from polar_cli.translate.upstream import UpstreamOptions, chat_body
from tests.support.recordings import API_OF_LABEL, find_body, recorded

# --- JSON values and bodies of plausible shape ------------------------------------------------------------------------

# NaN and infinities included: a decoder must refuse them or pass them on, never crash on them.
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
STRINGS = st.text(max_size=3) | JSON  # about half the time the right type


def words(text: str) -> list[str]:
    return text.split()


def typed(types: list[str], *keys: str, **special: Any) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with a plausible ``type``; ``keys`` are optional random values, ``special`` always present."""
    fields = {"type": st.sampled_from(types), **special}
    return st.fixed_dictionaries(fields, optional=dict.fromkeys(keys, JSON))


def _anthropic_bodies() -> st.SearchStrategy[dict[str, Any]]:
    source = typed(["base64", "url", "text", "content", "file", "x"], "media_type", "data", "url", "content")
    block = typed(
        words("text image document search_result tool_use tool_result thinking redacted_thinking tool_reference x"),
        *words("text id name input tool_use_id is_error thinking signature tool_name title"),
        source=st.just({"type": "base64", "media_type": "image/png", "data": "AA=="}) | source | JSON,
        content=STRINGS | st.lists(typed(["text", "image", "tool_reference", "x"], "text", "source", "tool_name")),
    )
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system", "tool"]) | JSON},
        optional={"content": STRINGS | st.lists(block, max_size=4)},
    )
    tool = st.fixed_dictionaries(
        {"name": STRINGS},
        optional={
            "type": st.sampled_from(["custom", "web_search_20250305", "bash_20250124"]) | JSON,
            "input_schema": st.just({"type": "object"}) | JSON,
            "description": STRINGS,
        },
    )
    return st.fixed_dictionaries(
        {"model": STRINGS, "messages": st.lists(message, max_size=5) | JSON},
        optional={
            "max_tokens": st.integers(-1, 10**6) | JSON,
            "system": STRINGS | st.lists(typed(["text", "x"], text=STRINGS), max_size=3),
            "tools": st.lists(tool, max_size=3) | JSON,
            "tool_choice": typed(["auto", "any", "tool", "none", "x"], "name", "disable_parallel_tool_use") | JSON,
            "thinking": typed(["enabled", "adaptive", "disabled", "x"], "budget_tokens") | JSON,
            "output_config": st.fixed_dictionaries(
                {}, optional={"effort": st.sampled_from(["low", "max", "x"]) | JSON, "format": typed(["json_schema"])}
            )
            | JSON,
            **{k: JSON for k in ("stop_sequences", "temperature", "top_p", "top_k", "stream", "output_format")},
        },
    )


def _chat_bodies() -> st.SearchStrategy[dict[str, Any]]:
    message = st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", 7])},
        optional={
            "content": JSON,
            "tool_calls": st.lists(st.fixed_dictionaries({"id": JSON, "type": JSON, "function": JSON}), max_size=2),
            "tool_call_id": JSON,
            "name": JSON,
            "reasoning_content": JSON,
            "function_call": JSON,
        },
    )
    return st.builds(
        lambda messages, tools: {"model": "m", "messages": messages, "tools": tools},
        st.lists(message, min_size=1, max_size=4),
        JSON,
    )


def _responses_bodies() -> st.SearchStrategy[dict[str, Any]]:
    # ``st.floats()`` with NaN throughout: the Responses fuzzer always drew them.
    parts = st.lists(
        typed(["input_text", "output_text", "refusal", "input_image", "x"], "refusal", "image_url", text=STRINGS)
    )
    items = typed(
        words("message reasoning function_call function_call_output custom_tool_call custom_tool_call_output"),
        role=st.sampled_from(["user", "assistant", "developer", "system"]) | JSON,
        **dict.fromkeys(("call_id", "name", "arguments", "input"), STRINGS),
        content=parts | JSON,
        output=parts | JSON,
        summary=parts | JSON,
    )
    tools = st.lists(
        typed(["function", "custom", "web_search", "x"], "description", "parameters", "format", name=STRINGS)
    )
    return st.fixed_dictionaries(
        {"model": st.text(max_size=4), "input": st.lists(items, max_size=5) | JSON},
        optional={
            "tools": tools | JSON,
            "instructions": st.text(max_size=4) | JSON,
            **{k: JSON for k in ("tool_choice", "reasoning", "text", "max_output_tokens", "stream")},
        },
    )


def _google_bodies() -> st.SearchStrategy[dict[str, Any]]:
    datum = st.one_of(
        st.fixed_dictionaries({"text": STRINGS}, optional={"thought": JSON | st.booleans()}),
        st.fixed_dictionaries(
            {"functionCall": st.fixed_dictionaries({"name": STRINGS}, optional={"args": JSON, "id": JSON})}
        ),
        st.fixed_dictionaries(
            {
                "functionResponse": st.fixed_dictionaries(
                    {"name": STRINGS}, optional={"response": JSON, "id": JSON, "parts": JSON}
                )
            }
        ),
        st.fixed_dictionaries(
            {
                "inlineData": st.fixed_dictionaries(
                    {}, optional={"mimeType": st.sampled_from(["image/png", "application/pdf"]) | JSON, "data": STRINGS}
                )
            }
        ),
        st.fixed_dictionaries({"fileData": st.fixed_dictionaries({}, optional={"fileUri": STRINGS, "mimeType": JSON})}),
        st.fixed_dictionaries({"thoughtSignature": STRINGS}),
        st.fixed_dictionaries({"executableCode": JSON}),
        JSON,
    )
    content = st.fixed_dictionaries(
        {},
        optional={
            "role": st.sampled_from(["user", "model", "function", "system"]) | JSON,
            "parts": st.lists(datum, max_size=4) | JSON,
        },
    )
    declaration = st.fixed_dictionaries(
        {"name": STRINGS},
        optional={
            "description": STRINGS,
            "parameters": st.just({"type": "OBJECT"}) | JSON,
            "parametersJsonSchema": JSON,
        },
    )
    tool = st.fixed_dictionaries(
        {"functionDeclarations": st.lists(declaration, max_size=3) | JSON}
    ) | st.fixed_dictionaries({"googleSearch": JSON})
    config = st.fixed_dictionaries(
        {},
        optional={
            **dict.fromkeys(
                words(
                    "temperature topP topK seed maxOutputTokens stopSequences candidateCount responseModalities "
                    "responseSchema responseJsonSchema"
                ),
                JSON,
            ),
            "responseMimeType": st.sampled_from(["application/json", "text/plain", "text/x.enum"]) | JSON,
            "thinkingConfig": st.fixed_dictionaries(
                {},
                optional={
                    "thinkingBudget": JSON,
                    "thinkingLevel": st.sampled_from(["LOW", "x"]) | JSON,
                    "includeThoughts": JSON,
                },
            )
            | JSON,
        },
    )
    return st.fixed_dictionaries(
        {"contents": st.lists(content, max_size=4) | JSON},
        optional={
            "systemInstruction": STRINGS | st.fixed_dictionaries({"parts": st.lists(datum, max_size=2)}),
            "tools": st.lists(tool, max_size=2) | JSON,
            "toolConfig": st.fixed_dictionaries(
                {
                    "functionCallingConfig": st.fixed_dictionaries(
                        {},
                        optional={
                            "mode": st.sampled_from(["AUTO", "ANY", "NONE", "x"]) | JSON,
                            "allowedFunctionNames": JSON,
                        },
                    )
                }
            )
            | JSON,
            "generationConfig": config | JSON,
            "cachedContent": JSON,
        },
    )


# --- what each stream and body says, read back ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Said:
    """What an encoded answer tells the harness: its text, its reasoning ("" for none), its tool calls' ids."""

    text: str
    reasoning: str
    call_ids: list[str]


def expected(completion: ir.Completion) -> Said:
    return Said(completion.text, completion.reasoning or "", [c.id for c in completion.tool_calls])


def _anthropic_body(body: dict[str, Any]) -> Said:
    blocks = body["content"]
    return Said(
        "".join(b["text"] for b in blocks if b["type"] == "text"),
        "".join(b["thinking"] for b in blocks if b["type"] == "thinking"),
        [b["id"] for b in blocks if b["type"] == "tool_use"],
    )


def _anthropic_stream(events: list[dict[str, Any]]) -> Said:
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    starts = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    return Said(
        "".join(d["text"] for d in deltas if d["type"] == "text_delta"),
        "".join(d["thinking"] for d in deltas if d["type"] == "thinking_delta"),
        [b["id"] for b in starts if b["type"] == "tool_use"],
    )


def _chat_body(body: dict[str, Any]) -> Said:
    message = body["choices"][0]["message"]
    return Said(
        message["content"] or "",
        message.get("reasoning_content") or "",
        [c["id"] for c in message.get("tool_calls", [])],
    )


def _chat_stream(events: list[dict[str, Any]]) -> Said:
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    return Said(
        "".join(d.get("content") or "" for d in deltas),
        "".join(d.get("reasoning_content") or "" for d in deltas),
        [c["id"] for d in deltas for c in d.get("tool_calls", []) if "id" in c],
    )


def _responses_body(body: dict[str, Any]) -> Said:
    output = body["output"]
    return Said(
        "".join(p["text"] for o in output if o["type"] == "message" for p in o["content"]),
        "".join(p["text"] for o in output if o["type"] == "reasoning" for p in o["summary"]),
        [o["call_id"] for o in output if o["type"] in ("function_call", "custom_tool_call")],
    )


def _responses_stream(events: list[dict[str, Any]]) -> Said:
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    return Said(
        "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta"),
        "".join(e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta"),
        [i["call_id"] for i in added if i["type"] in ("function_call", "custom_tool_call")],
    )


def _google_chunks(chunks: list[dict[str, Any]]) -> Said:
    parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    assert "finishReason" in chunks[-1]["candidates"][0] and "usageMetadata" in chunks[-1]
    return Said(
        "".join(p["text"] for p in parts if "text" in p and not p.get("thought")),
        "".join(p["text"] for p in parts if p.get("thought")),
        [p["functionCall"]["id"] for p in parts if "functionCall" in p],
    )


# --- the SDKs' stream event types -------------------------------------------------------------------------------------

_ANTHROPIC_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(anthropic.types.RawMessageStreamEvent)
_CHAT_CHUNK: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(openai.types.chat.ChatCompletionChunk)
_RESPONSES_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(openai.types.responses.ResponseStreamEvent)


def _validate_anthropic_event(event: dict[str, Any]) -> None:
    # ``ping`` is in Anthropic's stream grammar but not in the SDK's event union: its stream reader skips it.
    if event["type"] != "ping":
        _ANTHROPIC_EVENT.validate_python(event)


def _validate_chat_chunk(event: dict[str, Any]) -> None:
    # The SDK's chunk type knows only function tool-call deltas (see test_openai_chat_encode): a custom one is checked
    # by hand, and the rest of the chunk by the SDK.
    for choice in event["choices"]:
        calls = choice["delta"].get("tool_calls", [])
        for call in calls:
            if call.get("type") == "custom" or "custom" in call:
                assert set(call) <= {"index", "id", "type", "custom"} and isinstance(call["index"], int), call
                assert set(call["custom"]) <= {"name", "input"}, call
        choice["delta"]["tool_calls"] = [c for c in calls if "custom" not in c] or None
    _CHAT_CHUNK.validate_python(event)


# --- the four codecs --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Contract:
    codec: Codec
    # the recordings' api label and how many recordings it has
    label: str
    count: int
    # field names for random objects built from them (top-level ones; Google's nested ones too)
    keys: list[str]
    # the fields a refusal may name though the body lacks them (a required field reported missing)
    required: frozenset[str]
    bodies: st.SearchStrategy[dict[str, Any]]
    # a rich body (a recording with the fields it lacks added) for single-path mutations
    seed: dict[str, Any]
    # fields the node-replacing mutations do not descend into (tool schemas: they pass through as they are)
    opaque: frozenset[str]
    # the route for bodies with no recorded path
    route: Route
    # a minimal streaming request, for answers to encode
    stream_request: dict[str, Any]
    # full validation by the caller's SDK: of the answer body, of one stream event
    validate_body: Callable[[dict[str, Any]], object]
    validate_event: Callable[[dict[str, Any]], object]
    read_body: Callable[[dict[str, Any]], Said]
    read_stream: Callable[[list[dict[str, Any]]], Said]

    def __repr__(self) -> str:
        return f"Contract({self.codec.name})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # how hypothesis prints a failing case
        printer.text(repr(self))

    @property
    def records(self) -> list[dict[str, Any]]:
        return RECORDS[self.label]


def _route_of(record: dict[str, Any]) -> Route:
    route = route_for_path(record["path"], urlencode(record.get("query") or {}, doseq=True))
    assert route is not None, record["path"]
    return route


RECORDS = {label: recorded(API_OF_LABEL[label]) for label in ("anthropic", "chat", "responses", "gemini")}
USER = "hi"

CONTRACTS = [
    Contract(
        codec=CODECS["anthropic_messages"],
        label="anthropic",
        count=12,
        keys=words("model messages system tools tool_choice max_tokens thinking output_config stream"),
        required=frozenset({"model", "messages"}),
        bodies=_anthropic_bodies(),
        seed=find_body(RECORDS["anthropic"], "pi", "pi_tool_ant", 2)
        | {
            "tool_choice": {"type": "tool", "name": "bash", "disable_parallel_tool_use": True},
            "stop_sequences": ["END"],
            "temperature": 0.5,
            "top_k": 5,
            "output_config": {"effort": "high", "format": {"type": "json_schema", "schema": {"type": "object"}}},
        },
        opaque=frozenset({"input_schema"}),
        route=Route(api="anthropic_messages"),
        stream_request={"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": USER}], "stream": True},
        validate_body=anthropic.types.Message.model_validate,
        validate_event=_validate_anthropic_event,
        read_body=_anthropic_body,
        read_stream=_anthropic_stream,
    ),
    Contract(
        codec=CODECS["openai_chat"],
        label="chat",
        count=34,
        keys=words("model messages tools tool_choice max_tokens stop response_format stream_options n"),
        required=frozenset({"model", "messages"}),
        bodies=_chat_bodies(),
        seed=find_body(RECORDS["chat"], "pi", "pi_tool_oai", 2)
        | {
            "tool_choice": {"type": "function", "function": {"name": "bash"}},
            "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}},
            "stop": ["END"],
            "n": 1,
            "seed": 7,
            "reasoning_effort": "low",
            "chat_template_kwargs": {"enable_thinking": True},
            "parallel_tool_calls": False,
        },
        opaque=frozenset({"parameters"}),
        route=Route(api="openai_chat"),
        stream_request={
            "model": "m",
            "messages": [{"role": "user", "content": USER}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        validate_body=openai.types.chat.ChatCompletion.model_validate,
        validate_event=_validate_chat_chunk,
        read_body=_chat_body,
        read_stream=_chat_stream,
    ),
    Contract(
        codec=CODECS["openai_responses"],
        label="responses",
        count=9,
        keys=words("model input instructions tools tool_choice reasoning text max_output_tokens stream"),
        required=frozenset({"model", "input"}),
        bodies=_responses_bodies(),
        seed=find_body(RECORDS["responses"], "pi", "pi_tool_resp", 2)
        | {
            "instructions": "be brief",
            "tool_choice": {"type": "function", "name": "bash"},
            "text": {"format": {"type": "json_schema", "name": "r", "schema": {"type": "object"}}},
            "temperature": 0.5,
            "parallel_tool_calls": False,
        },
        opaque=frozenset({"parameters"}),
        route=Route(api="openai_responses"),
        stream_request={"model": "m", "input": USER, "stream": True},
        validate_body=openai.types.responses.Response.model_validate,
        validate_event=_RESPONSES_EVENT.validate_python,
        read_body=_responses_body,
        read_stream=_responses_stream,
    ),
    Contract(
        codec=CODECS["google_genai"],
        label="gemini",
        count=17,
        keys=words(
            "contents parts role text thought functionCall functionResponse inlineData fileData name id args "
            "response tools functionDeclarations parameters parametersJsonSchema generationConfig thinkingConfig "
            "toolConfig systemInstruction type properties items"
        ),
        required=frozenset({"contents", "model"}),
        bodies=_google_bodies(),
        seed=find_body(RECORDS["gemini"], "pi", "pi_tool_gem", 2)
        | {
            "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
            "generationConfig": {"thinkingConfig": {"thinkingBudget": 5}, "responseSchema": {"type": "OBJECT"}},
        },
        opaque=frozenset({"parameters", "parametersJsonSchema"}),
        route=Route(api="google_genai", model="gemini-lab", stream=True),
        stream_request={"contents": [{"role": "user", "parts": [{"text": USER}]}]},
        validate_body=genai_types.GenerateContentResponse.model_validate,
        validate_event=genai_types.GenerateContentResponse.model_validate,
        read_body=lambda body: _google_chunks([body]),
        read_stream=_google_chunks,
    ),
]


@pytest.fixture(scope="module", params=CONTRACTS, ids=[c.codec.name for c in CONTRACTS])
def contract(request: pytest.FixtureRequest) -> Contract:
    found: Contract = request.param
    assert CODECS[found.codec.name] is found.codec
    return found


def test_every_codec_has_a_contract() -> None:
    assert sorted(c.codec.name for c in CONTRACTS) == sorted(CODECS)
    assert {c.label for c in CONTRACTS} == {r["api"] for r in recorded()}


# --- decoding: recorded traffic ---------------------------------------------------------------------------------------


def test_there_are_recordings_to_mutate(contract: Contract) -> None:
    assert len(contract.records) == contract.count


def test_every_recorded_request_decodes(contract: Contract) -> None:
    for record in contract.records:
        route = _route_of(record)
        assert route.api == contract.codec.name
        body = record["body"]
        untouched = copy.deepcopy(body)
        request = contract.codec.decode_request(body, route)
        assert isinstance(request, ir.ChatRequest)
        assert body == untouched, "the decoder changed the body it was given"
        assert request == contract.codec.decode_request(body, route)
        assert request.model == (route.model or body["model"])
        assert request.stream is (route.stream if route.stream is not None else bool(body.get("stream")))
        assert request.messages and request.messages[-1].role != "assistant"
        called = {c.id for m in request.messages for c in m.tool_calls}
        assert all(m.tool_call_id in called for m in request.messages if m.role == "tool")
        _check_decoded(request)


def test_the_seed_body_decodes(contract: Contract) -> None:
    request = contract.codec.decode_request(contract.seed, contract.route)
    _check_decoded(request)
    assert request.tools and request.tool_choice is not None


def _check_decoded(request: ir.ChatRequest) -> None:
    """What the gateway does next with a decoded request does not fail: it builds the upstream body from it."""
    orjson.dumps([m.text for m in request.messages])
    chat_body(request, UpstreamOptions(), rid="rid")


# --- decoding: refusals -----------------------------------------------------------------------------------------------

# ``<field>: <problem>``, the field a top-level name possibly followed by a path into it (``messages[3].content``).
FIELD = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:[.\[].*?)?: \S", re.DOTALL)


def decodes_or_refuses(contract: Contract, body: Any, route: Route | None = None) -> None:
    """Decode ``body``: a `ChatRequest`, or a `RequestError` whose message starts with a field of the body.

    Any other exception propagates and fails the test.
    """
    try:
        request = contract.codec.decode_request(body, route or contract.route)
    except RequestError as exc:
        assert 400 <= exc.status < 500, exc
        match = FIELD.match(exc.message)
        assert match is not None, f"refusal names no field: {exc.message!r}"
        if not isinstance(body, dict):
            assert match["name"] == "body", exc.message
        else:
            names = {*body, *map(camel, body), *contract.required}
            assert match["name"] in names, f"refusal names {match['name']!r}, not a field of the body: {exc.message!r}"
    except PolarError as exc:  # pragma: no cover - a failure message, not a path
        raise AssertionError(f"not a RequestError: {exc!r}") from exc
    else:
        assert isinstance(request, ir.ChatRequest)
        _check_decoded(request)


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(body=JSON)
def test_random_json_decodes_or_is_refused(contract: Contract, body: Any) -> None:
    decodes_or_refuses(contract, body)


@FUZZ
@given(data=st.data())
def test_random_objects_of_the_apis_fields_decode_or_are_refused(contract: Contract, data: st.DataObject) -> None:
    body = data.draw(st.dictionaries(st.sampled_from(contract.keys), JSON, max_size=6))
    decodes_or_refuses(contract, body)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_bodies_of_plausible_shape_decode_or_are_refused(contract: Contract, data: st.DataObject) -> None:
    decodes_or_refuses(contract, data.draw(contract.bodies))


# --- decoding: mutated recordings -------------------------------------------------------------------------------------


def _paths(node: Any, opaque: frozenset[str] = frozenset(), prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``node`` (the empty path first), not descending below the keys in ``opaque``."""
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += [(*prefix, key)] if key in opaque else _paths(value, opaque, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, opaque, (*prefix, index))
    return found


def _parent(body: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        body = body[step]
    return body


@FUZZ
@given(data=st.data(), edits=st.lists(st.tuples(st.integers(0, 10_000), JSON), min_size=1, max_size=4))
def test_recordings_with_values_replaced_decode_or_are_refused(
    contract: Contract, data: st.DataObject, edits: list[tuple[int, Any]]
) -> None:
    """Replace random nodes of a real body (one to four) with random JSON of any type."""
    record = data.draw(st.sampled_from(contract.records))
    body = copy.deepcopy(record["body"])
    for pick, value in edits:
        paths = _paths(body, contract.opaque)[1:]
        if paths:
            path = paths[pick % len(paths)]
            _parent(body, path)[path[-1]] = value
        else:
            body[contract.keys[pick % len(contract.keys)]] = value
    decodes_or_refuses(contract, body, _route_of(record))


def _drop(parent: Any, key: Any, value: Any) -> None:
    del parent[key]


def _retype(parent: Any, key: Any, value: Any) -> None:
    """The same value as another JSON type: a string for a number, a list for an object, and so on."""
    if isinstance(value, str):
        parent[key] = [value] if value else 0
    elif isinstance(value, bool) or value is None:
        parent[key] = str(value).lower()
    elif isinstance(value, int | float):
        parent[key] = str(value)
    elif isinstance(value, list):
        parent[key] = {str(i): item for i, item in enumerate(value)}
    else:
        parent[key] = list(value.values())


def _empty(parent: Any, key: Any, value: Any) -> None:
    parent[key] = type(value)() if isinstance(value, dict | list | str) else None


def _duplicate(parent: Any, key: Any, value: Any) -> None:
    if isinstance(parent, list):
        parent.insert(key, copy.deepcopy(value))
    else:
        parent[f"{key}_"] = copy.deepcopy(value)


EDITS = [_drop, _retype, _empty, _duplicate]


@FUZZ
@given(
    data=st.data(), edits=st.lists(st.tuples(st.sampled_from(EDITS), st.integers(0, 10_000)), min_size=1, max_size=4)
)
def test_recordings_with_fields_dropped_or_retyped_decode_or_are_refused(
    contract: Contract, data: st.DataObject, edits: list[tuple[Callable[[Any, Any, Any], None], int]]
) -> None:
    """Structural edits of a real body: drop a key or an item, change a value's JSON type, empty it, duplicate it."""
    record = data.draw(st.sampled_from(contract.records))
    body = copy.deepcopy(record["body"])
    for edit, pick in edits:
        paths = _paths(body, contract.opaque)[1:]
        if not paths:
            break
        path = paths[pick % len(paths)]
        parent = _parent(body, path)
        edit(parent, path[-1], parent[path[-1]])
    decodes_or_refuses(contract, body, _route_of(record))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), replacement=JSON)
def test_seed_body_with_one_value_replaced_decodes_or_is_refused(
    contract: Contract, data: st.DataObject, replacement: Any
) -> None:
    body = copy.deepcopy(contract.seed)
    path = data.draw(st.sampled_from(_paths(body)[1:]))
    _parent(body, path)[path[-1]] = replacement
    decodes_or_refuses(contract, body)


REPLACEMENTS: list[Any] = [None, 0, -1, 1.5, True, "", "x", [], {}, [None], {"type": "text"}, 10**30]


@pytest.mark.parametrize("seed", range(6))
def test_every_recording_with_one_value_replaced_decodes_or_is_refused(contract: Contract, seed: int) -> None:
    """Forty seeded single-value replacements of every recording, from a fixed list of awkward values."""
    rng = random.Random(seed)
    for record in contract.records:
        route = _route_of(record)
        for _ in range(40):
            body = copy.deepcopy(record["body"])
            path = rng.choice(_paths(body)[1:])
            _parent(body, path)[path[-1]] = rng.choice(REPLACEMENTS)
            decodes_or_refuses(contract, body, route)


# --- encoding ---------------------------------------------------------------------------------------------------------

tool_calls = st.lists(
    st.builds(
        ir.ToolCall,
        id=st.uuids().map(lambda u: f"call_{u.hex}"),
        name=st.text(min_size=1, max_size=5),
        arguments=st.text(max_size=20) | st.just('{"command": "ls"}'),
        kind=st.sampled_from(["function", "custom"]),
    ),
    max_size=3,
)
completions = st.builds(
    ir.Completion,
    id=st.text("abc123", min_size=1, max_size=6),
    model=st.just("m"),
    created=st.integers(0, 2**31),
    text=st.text(max_size=20),
    reasoning=st.none() | st.text(max_size=20),
    tool_calls=tool_calls.map(tuple),
    finish_reason=st.sampled_from(["stop", "length", "tool_calls", "content_filter", "abort"]),
    usage=st.builds(ir.Usage, st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10), st.integers(0, 10)),
)


_DECODED: dict[str, list[ir.ChatRequest]] = {}


def _requests(contract: Contract) -> list[ir.ChatRequest]:
    """The minimal streaming request, and every recorded one (decoded once per codec)."""
    if contract.codec.name not in _DECODED:
        minimal = contract.codec.decode_request(contract.stream_request, contract.route)
        recorded_ones = [contract.codec.decode_request(r["body"], _route_of(r)) for r in contract.records]
        _DECODED[contract.codec.name] = [minimal, *recorded_ones]
    return _DECODED[contract.codec.name]


def sse_events(frames: list[bytes]) -> Iterator[dict[str, Any]]:
    """The JSON events of complete SSE frames: ``event:`` (naming the data's type) then one ``data:`` line each."""
    for i, frame in enumerate(frames):
        assert isinstance(frame, bytes) and frame.endswith(b"\n\n"), frame
        lines = dict(line.split(b": ", 1) for line in frame[:-2].split(b"\n"))
        assert set(lines) <= {b"event", b"data"} and b"data" in lines, frame
        if lines[b"data"] == b"[DONE]":
            assert i == len(frames) - 1, "data: [DONE] before the last frame"
            continue
        event = orjson.loads(lines[b"data"])
        if b"event" in lines:
            assert lines[b"event"].decode() == event["type"]
        yield event


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), completion=completions)
def test_any_completion_encodes_to_valid_bodies_and_streams(
    contract: Contract, data: st.DataObject, completion: ir.Completion
) -> None:
    """The body and the stream validate against the caller's SDK types and say what the completion says."""
    request = data.draw(st.sampled_from(_requests(contract)))
    codec = contract.codec
    body = codec.encode_response(request, completion)
    assert isinstance(body, dict)
    assert orjson.loads(orjson.dumps(body)) == body
    contract.validate_body(copy.deepcopy(body))
    assert contract.read_body(body) == expected(completion)

    frames = codec.encode_stream(request, completion)
    events = list(sse_events(frames))
    for event in events:
        contract.validate_event(copy.deepcopy(event))
    assert contract.read_stream(events) == expected(completion)
    if codec.name == "openai_responses":
        assert events[-1]["response"] == body
    if codec.name == "openai_chat":
        assert frames[-1] == b"data: [DONE]\n\n"
        assert ("usage" in events[-1] and not events[-1]["choices"]) is request.include_usage

    sse = codec.stream(request, completion, Route(api=codec.name))
    assert sse.chunks == frames and sse.content_type == "text/event-stream"
    plain = codec.stream(request, completion, Route(api=codec.name, sse=False))
    if codec.encode_json_stream is None:
        assert plain == sse
    else:
        assert plain.content_type == "application/json" and len(plain.chunks) == 1
        assert orjson.loads(plain.chunks[0]) == [body]


ERROR_STATUSES: dict[ErrorKind, list[int]] = {
    "invalid_request": [400, 408, 431, 501, 505],
    "authentication": [401],
    "not_found": [404],
    "method_not_allowed": [405],
    "payload_too_large": [413],
    "unsupported_media_type": [415],
    "context_length": [400],
    "upstream": [429, 500, 502, 503, 504, 529],
    "overloaded": [503, 529],
    "timeout": [504],
}
MESSAGE = "messages[2].content: something was wrong"


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def test_every_error_kind_encodes_to_a_json_object_that_carries_the_message(contract: Contract) -> None:
    assert sorted(ERROR_STATUSES) == sorted(ErrorKind.__args__)  # type: ignore[attr-defined]
    for kind, statuses in ERROR_STATUSES.items():
        for status in statuses:
            body = contract.codec.encode_error(status, kind, MESSAGE)
            assert isinstance(body, dict), (kind, status)
            assert orjson.loads(orjson.dumps(body)) == body
            assert any(MESSAGE in s for s in _strings(body)), (kind, status, body)


def test_errors_inside_a_stream_are_valid_events(contract: Contract) -> None:
    codec = contract.codec
    assert (codec.encode_stream_error is None) == (not codec.stream_error_kinds)
    if codec.encode_stream_error is None:
        return
    request = codec.decode_request(contract.stream_request, contract.route)
    for kind in codec.stream_error_kinds:
        # Not validated by the SDK: Codex reads a code (context_length_exceeded) the SDK's types do not list.
        events = list(sse_events(codec.encode_stream_error(request, "abc", 0, kind, MESSAGE)))
        assert events and events[-1]["type"] == "response.failed"
        assert any(MESSAGE in s for s in _strings(events[-1]))


# --- numbers as the wire carries them ---------------------------------------------------------------------------------

# Integer fields given 1e300: orjson parses a number that size as a float, so a body can carry it, and the decoder
# must refuse it or hand on something the upstream's JSON can hold (orjson writes integers of 64 bits at most).
HUGE_INTEGERS: dict[str, list[dict[str, Any]]] = {
    "anthropic_messages": [
        {"max_tokens": 1e300},
        {"top_k": 1e300},
        {"thinking": {"type": "enabled", "budget_tokens": 1e300}},
    ],
    "openai_chat": [{"max_tokens": 1e300}, {"max_completion_tokens": 1e300}, {"seed": 1e300}, {"top_k": 1e300}],
    "openai_responses": [{"max_output_tokens": 1e300}, {"seed": 1e300}, {"top_k": 1e300}],
    "google_genai": [{"generationConfig": {key: 1e300}} for key in ("maxOutputTokens", "topK", "seed")],
}


def test_huge_integers_are_refused_or_reach_the_upstream(contract: Contract) -> None:
    for fields in HUGE_INTEGERS[contract.codec.name]:
        body = orjson.loads(orjson.dumps(contract.stream_request | fields))
        try:
            decoded = contract.codec.decode_request(body, contract.route)
        except RequestError:
            continue
        orjson.dumps(chat_body(decoded, UpstreamOptions(), rid="rid"))
