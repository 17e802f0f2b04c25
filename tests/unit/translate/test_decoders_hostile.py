"""Every API decoder against arbitrary JSON: a `ChatRequest` or a `RequestError` with a 4xx status, never another
exception (which the server would turn into a 500 and a traceback in the log)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polar_cli.errors import RequestError
from polar_cli.translate.codec import Route
from polar_cli.translate.ir import ChatRequest
from polar_cli.translate.registry import CODECS

# keys each API reads, so that generated objects reach past the first "field missing" check
_KEYS = [
    "model", "messages", "content", "role", "type", "text", "input", "instructions", "system", "tools", "tool_choice",
    "name", "arguments", "function", "parameters", "input_schema", "id", "tool_use_id", "tool_call_id", "call_id",
    "max_tokens", "max_output_tokens", "temperature", "top_p", "stop", "stream", "reasoning", "thinking",
    "contents", "parts", "functionCall", "functionResponse", "generationConfig", "systemInstruction", "inlineData",
    "fileData", "source", "image_url", "url", "output", "response_format", "text", "metadata", "tool_calls", "args",
]  # fmt: skip
_SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["user", "assistant", "system", "tool", "function", "text", "image", "tool_use", "message"])
)
_JSON: Any = st.recursive(
    _SCALAR,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(_KEYS) | st.text(max_size=4), inner, max_size=5)
    ),
    max_leaves=25,
)
_BODY = st.dictionaries(st.sampled_from(_KEYS), _JSON, max_size=6)


@pytest.mark.parametrize("api", sorted(CODECS))
@settings(max_examples=200, deadline=None)
@given(body=_BODY)
def test_any_json_object_is_a_request_or_a_clean_4xx(api: str, body: dict[str, Any]) -> None:
    route = Route(api, model="m") if api == "google_genai" else Route(api)  # type: ignore[arg-type]
    try:
        assert isinstance(CODECS[api].decode_request(body, route), ChatRequest)  # type: ignore[index]
    except RequestError as exc:
        assert 400 <= exc.status < 500 and exc.message
