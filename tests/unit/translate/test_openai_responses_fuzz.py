"""Random input for the Responses codec: the decoder refuses bad JSON only with a RequestError, never a crash; the
stream encoder turns any completion into events the SDK validates and that add up to the completion."""

from __future__ import annotations

from typing import Any

import orjson
import pydantic
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseStreamEvent

from polar_cli.errors import PolarError, RequestError
from polar_cli.translate import ir
from polar_cli.translate.codec import Route
from polar_cli.translate.openai_responses import CODEC, decode_request

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


def typed(types: list[str], *keys: str, **special: Any) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with a plausible ``type``; ``keys`` are optional random values, ``special`` always present."""
    fields = {"type": st.sampled_from(types), **special}
    return st.fixed_dictionaries(fields, optional=dict.fromkeys(keys, json_values))


strings = st.text(max_size=3) | json_values  # about half the time the right type
parts = st.lists(
    typed(["input_text", "output_text", "refusal", "input_image", "x"], "refusal", "image_url", text=strings)
)
items = typed(
    ["message", "reasoning", "function_call", "function_call_output", "custom_tool_call", "custom_tool_call_output"],
    role=st.sampled_from(["user", "assistant", "developer", "system"]) | json_values,
    **dict.fromkeys(("call_id", "name", "arguments", "input"), strings),
    content=parts | json_values,
    output=parts | json_values,
    summary=parts | json_values,
)
tools = st.lists(typed(["function", "custom", "web_search", "x"], "description", "parameters", "format", name=strings))
bodies = st.fixed_dictionaries(
    {"model": st.text(max_size=4), "input": st.lists(items, max_size=5) | json_values},
    optional={
        "tools": tools | json_values,
        "instructions": st.text(max_size=4) | json_values,
        **{k: json_values for k in ("tool_choice", "reasoning", "text", "max_output_tokens", "stream")},
    },
)


@settings(max_examples=400, deadline=None)
@given(bodies)
def test_fuzz_only_request_errors(body: dict[str, Any]) -> None:
    try:
        req = decode_request(body, Route(api="openai_responses"))
    except PolarError as exc:
        assert isinstance(exc, RequestError)
    else:
        orjson.dumps([m.text for m in req.messages])


tool_calls = st.lists(
    st.builds(
        ir.ToolCall,
        id=st.uuids().map(lambda u: f"call_{u.hex}"),
        name=st.text(min_size=1, max_size=5),
        arguments=st.text(max_size=20),
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
    usage=st.builds(ir.Usage, st.integers(0, 10**6), st.integers(0, 10**6)),
)
EVENTS: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(ResponseStreamEvent)


@settings(max_examples=200, deadline=None)
@given(completions)
def test_any_completion_streams_valid_events(completion: ir.Completion) -> None:
    request = decode_request({"model": "m", "input": "hi", "stream": True}, Route(api="openai_responses"))
    events = [orjson.loads(frame.split(b"data: ", 1)[1]) for frame in CODEC.encode_stream(request, completion)]
    for event in events:
        EVENTS.validate_python(event)
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == completion.text
    final = events[-1]["response"]
    assert final == CODEC.encode_response(request, completion)
    calls = [o for o in final["output"] if o["type"] in ("function_call", "custom_tool_call")]
    assert [c["call_id"] for c in calls] == [c.id for c in completion.tool_calls]
