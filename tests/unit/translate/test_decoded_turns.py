"""Assistant turns decoded once are served again by their JSON text: the same Message decoding would build, never
one for a content that differs in any value or type, never for a content that fails, and within the byte budget."""

from __future__ import annotations

import re
from typing import Any

import pytest

from polar_cli.errors import RequestError
from polar_cli.translate.anthropic_messages import _assistant_turn, _DecodedTurns


def _content(value: Any) -> list[dict[str, Any]]:
    return [
        {"type": "thinking", "thinking": "hm"},
        {"type": "text", "text": "Running it."},
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"n": value}},
    ]


def test_a_hit_is_what_decoding_builds() -> None:
    turns = _DecodedTurns(max_bytes=1 << 20)
    first = turns.assistant_turn(_content(1), "messages[1]")
    again = turns.assistant_turn(_content(1), "messages[7]")
    assert again is first
    assert again == _assistant_turn(_content(1), "messages[7]")


@pytest.mark.parametrize("other", [1.0, True, "1", [1], None, -0.0])
def test_an_equal_looking_value_of_another_type_is_decoded_afresh(other: Any) -> None:
    turns = _DecodedTurns(max_bytes=1 << 20)
    turns.assistant_turn(_content(1), "messages[1]")
    got = turns.assistant_turn(_content(other), "messages[3]")
    assert got == _assistant_turn(_content(other), "messages[3]")
    assert got.tool_calls[0].arguments != '{"n": 1}' or other == 1


def test_a_turn_that_fails_fails_every_time() -> None:
    turns = _DecodedTurns(max_bytes=1 << 20)
    bad = [{"type": "tool_use", "id": 5, "name": "bash", "input": {}}]
    for path in ("messages[1]", "messages[3]"):
        with pytest.raises(RequestError, match=re.escape(f"{path}.content[0].id")):
            turns.assistant_turn(bad, path)


def test_the_texts_kept_stay_within_the_budget() -> None:
    turns = _DecodedTurns(max_bytes=2000)
    for i in range(100):
        turns.assistant_turn(_content(i), "messages[1]")
    assert 0 < turns._bytes <= 2000
    assert len(turns._turns) < 100


@pytest.mark.parametrize("other", [float("nan"), float("inf"), (1,)])
def test_a_value_json_text_cannot_tell_apart_is_decoded_afresh(other: Any) -> None:
    turns = _DecodedTurns(max_bytes=1 << 20)
    twin = None if isinstance(other, float) else [1]  # orjson writes NaN and inf as null, a tuple as a list
    turns.assistant_turn(_content(twin), "messages[1]")
    assert turns.assistant_turn(_content(other), "messages[3]") == _assistant_turn(_content(other), "messages[3]")


def test_a_tuple_of_blocks_is_refused_even_after_its_list_twin() -> None:
    turns = _DecodedTurns(max_bytes=1 << 20)
    turns.assistant_turn(_content(1), "messages[1]")
    with pytest.raises(RequestError, match="expected an array"):
        turns.assistant_turn(tuple(_content(1)), "messages[3]")
