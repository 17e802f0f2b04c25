"""Fuzzing the OpenAI Chat decoder: any JSON either decodes or is refused with a RequestError, never a crash."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polar_cli.errors import PolarError, RequestError
from polar_cli.translate.codec import Route
from polar_cli.translate.openai_chat import decode_request

ROUTE = Route(api="openai_chat")
RECORDINGS = Path(__file__).parents[2] / "data" / "harness_requests"
RECORDED = [
    record
    for path in sorted(RECORDINGS.glob("*.jsonl"))
    for record in map(json.loads, path.read_text().splitlines())
    if record.get("api") == "chat"
]


def test_there_are_recordings_to_mutate() -> None:
    assert len(RECORDED) == 34


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
_KEYS = st.sampled_from(
    ["model", "messages", "tools", "tool_choice", "max_tokens", "stop", "response_format", "stream_options", "n"]
)


def _decodes_or_refuses(body: Any) -> None:
    try:
        decode_request(body, ROUTE)
    except RequestError:
        pass
    except PolarError as exc:  # pragma: no cover - a failure message, not a path
        raise AssertionError(f"not a RequestError: {exc!r}") from exc


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_KEYS, _JSON, max_size=6))
def test_random_json_never_crashes(body: dict[str, Any]) -> None:
    _decodes_or_refuses(body)


_ROLES = st.sampled_from(["system", "developer", "user", "assistant", "tool", "function", 7])
_MESSAGE = st.fixed_dictionaries(
    {"role": _ROLES},
    optional={
        "content": _JSON,
        "tool_calls": st.lists(st.fixed_dictionaries({"id": _JSON, "type": _JSON, "function": _JSON}), max_size=2),
        "tool_call_id": _JSON,
        "name": _JSON,
        "reasoning_content": _JSON,
        "function_call": _JSON,
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_MESSAGE, min_size=1, max_size=4), _JSON)
def test_random_messages_never_crash(messages: list[dict[str, Any]], tools: Any) -> None:
    _decodes_or_refuses({"model": "m", "messages": messages, "tools": tools})


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


@pytest.mark.parametrize("seed", range(6))
def test_mutated_recordings_never_crash(seed: int) -> None:
    rng = random.Random(seed)
    replacements: list[Any] = [None, 0, -1, 1.5, True, "", "x", [], {}, [None], {"type": "text"}, 10**30]
    for record in RECORDED:
        for _ in range(40):
            body = copy.deepcopy(record["body"])
            path = rng.choice(_paths(body)[1:])
            parent = body
            for step in path[:-1]:
                parent = parent[step]
            parent[path[-1]] = rng.choice(replacements)
            _decodes_or_refuses(body)
