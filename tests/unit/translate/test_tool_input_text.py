"""An echoed tool call's arguments are the text ``json.dumps(input, ensure_ascii=False)`` gives (the separators the
upstream's tool parsers emit), whichever encoder the decoder runs."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from polar_cli.translate.anthropic_messages import _tool_use

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), _JSON, max_size=6))
def test_arguments_are_json_dumps_text(arguments: dict[str, Any]) -> None:
    call = _tool_use({"type": "tool_use", "id": "t", "name": "n", "input": arguments}, "messages[1].content[0]")
    assert call.arguments == json.dumps(arguments, ensure_ascii=False)


def test_parsed_input_keeps_unicode_and_float_spelling() -> None:
    arguments = orjson.loads('{"path": "é ✓ \\ud83d\\ude00", "n": 1e16, "x": [1.5, -0.0, {"a": null}]}')
    call = _tool_use({"type": "tool_use", "id": "t", "name": "n", "input": arguments}, "p")
    assert call.arguments == '{"path": "é ✓ 😀", "n": 1e+16, "x": [1.5, -0.0, {"a": null}]}'
