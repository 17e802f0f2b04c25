"""Fuzzing the Anthropic Messages decoder: any JSON gives a ChatRequest or a RequestError, never another exception."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from polar_cli.errors import PolarError, RequestError
from polar_cli.translate.anthropic_messages import decode_request
from polar_cli.translate.codec import Route

ROUTE = Route(api="anthropic_messages")
RECORDINGS = Path(__file__).parents[2] / "data" / "harness_requests"
RECORDED = [
    record
    for path in sorted(RECORDINGS.glob("*.jsonl"))
    for record in map(json.loads, path.read_text().splitlines())
    if record.get("api") == "anthropic"
]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_KEYS = ["model", "messages", "system", "tools", "tool_choice", "max_tokens", "thinking", "output_config", "stream"]


def _try(body: Any) -> None:
    try:
        decode_request(body, ROUTE)
    except PolarError as exc:
        assert isinstance(exc, RequestError)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_fuzz_random_json(body: Any) -> None:
    _try(body)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(RECORDED), st.lists(st.tuples(st.integers(0, 10_000), _json), min_size=1, max_size=4))
def test_fuzz_mutated_recordings(record: dict[str, Any], edits: list[tuple[int, Any]]) -> None:
    """Replace random nodes of a real body with random JSON."""
    body = copy.deepcopy(record["body"])
    for pick, value in edits:
        container, key = _random_node(body, pick)
        container[key] = value
    _try(body)


def _random_node(body: dict[str, Any], pick: int) -> tuple[Any, Any]:
    nodes: list[tuple[Any, Any]] = []
    stack: list[Any] = [body]
    while stack:
        current = stack.pop()
        items = current.items() if isinstance(current, dict) else enumerate(current)
        for key, value in items:
            nodes.append((current, key))
            if isinstance(value, dict | list) and key != "input_schema":
                stack.append(value)
    return nodes[pick % len(nodes)] if nodes else (body, _KEYS[pick % len(_KEYS)])
