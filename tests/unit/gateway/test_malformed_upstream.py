"""Malformed upstream answers, field by field: each is the server's fault, answered 502 in the caller's API shape and
recorded as an ``upstream_error`` (a retried machinery error downstream), never a crash of the call with no record."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polar_cli.capture import CaptureWriter, read_session
from polar_cli.capture.store import session_file
from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.translate.upstream import UpstreamOptions
from polar_cli.wire.http11 import Request, Response
from tests.unit.gateway.test_handler import ANSWER

CALL = {"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "go"}]}

# (path into ANSWER, the value put there)
MUTATIONS: list[tuple[tuple[str | int, ...], Any]] = [
    (("choices",), None),
    (("choices",), []),
    (("choices",), "x"),
    (("choices", 0), None),
    (("choices", 0, "message"), None),
    (("choices", 0, "message"), "hi"),
    (("choices", 0, "message", "content"), 5),
    (("choices", 0, "message", "content"), ["a"]),
    (("choices", 0, "message", "content"), {"text": "a"}),
    (("choices", 0, "message", "reasoning_content"), 5),
    (("choices", 0, "message", "tool_calls"), "x"),
    (("choices", 0, "message", "tool_calls"), [None]),
    (("choices", 0, "message", "tool_calls"), [5]),
    (("choices", 0, "message", "tool_calls", 0, "function"), "x"),
    (("choices", 0, "message", "tool_calls", 0, "function", "name"), 5),
    (("choices", 0, "message", "tool_calls", 0, "function", "name"), ["Bash"]),
    (("choices", 0, "message", "tool_calls", 0, "id"), 5),
    (("choices", 0, "logprobs"), None),
    (("choices", 0, "logprobs", "content"), "x"),
    (("choices", 0, "logprobs", "content", 0, "logprob"), None),
    (("choices", 0, "logprobs", "content", 0, "logprob"), "-0.1"),
    (("choices", 0, "logprobs", "content", 0, "logprob"), True),
    (("choices", 0, "logprobs", "content", 0, "logprob"), [1]),
    (("choices", 0, "logprobs", "content", 0), None),
    (("choices", 0, "logprobs", "content", 1), "x"),
    (("choices", 0, "prompt_token_ids"), None),
    (("choices", 0, "prompt_token_ids"), "123"),
    (("choices", 0, "prompt_token_ids"), [1, 2.5, 3]),
    (("choices", 0, "prompt_token_ids"), [1, "2", 3]),
    (("choices", 0, "prompt_token_ids"), [1, None, 3]),
    (("choices", 0, "prompt_token_ids"), [1, True, 3]),
    (("choices", 0, "prompt_token_ids"), [1, -2, 3]),
    (("choices", 0, "prompt_token_ids"), [1, 2**40, 3]),
    (("choices", 0, "prompt_token_ids"), [1, [2], 3]),
    (("choices", 0, "response_token_ids"), [7.0, 8]),
    (("choices", 0, "response_token_ids"), [7, 8, 9]),
    (("choices", 0, "response_token_ids"), []),
    (("choices", 0, "finish_reason"), 5),
    (("choices", 0, "finish_reason"), ["stop"]),
    (("usage",), "x"),
    (("usage",), [1]),
    (("usage",), 5),
    (("usage", "prompt_tokens"), "3"),
    (("usage", "prompt_tokens"), 3.5),
    (("usage", "prompt_tokens"), -1),
    (("usage", "prompt_tokens"), True),
    (("usage", "prompt_tokens"), [3]),
    (("usage", "completion_tokens"), "two"),
    (("usage", "completion_tokens_details"), {"reasoning_tokens": "x"}),
    (("usage", "prompt_tokens_details"), {"cached_tokens": {}}),
]


def mutated(path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    answer = copy.deepcopy(ANSWER)
    target: Any = answer
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return answer


class RawUpstream:
    def __init__(self, body: bytes) -> None:
        self.body = body

    async def post_json(self, path: str, body: bytes, *, session: str | None = None) -> Response:
        return Response(200, "OK", {}, self.body, True)

    async def close(self) -> None:
        pass


def call_with(tmp_path: Path, answer: bytes, api_path: str = "/v1/messages", body: Any = CALL) -> tuple[int, Any, str]:
    """(status, decoded reply body, the capture record's status) of one call answered with ``answer``."""
    sessions = SessionRegistry()
    sessions.open("s", "sk-1")
    writer = CaptureWriter(tmp_path)
    gateway = Gateway(
        upstream=RawUpstream(answer), options=UpstreamOptions(model="m"), sessions=sessions, capture=writer
    )  # type: ignore[arg-type]
    request = Request("POST", api_path, api_path, "", {"x-api-key": "sk-1"}, orjson.dumps(body), True)
    reply = asyncio.run(gateway.handle(request))
    writer.close()
    (record,) = read_session(session_file(tmp_path, "s"))
    session_file(tmp_path, "s").unlink()
    return reply.status, orjson.loads(reply.body), record.status


@pytest.mark.parametrize(
    ("path", "value"), MUTATIONS, ids=[f"{'.'.join(map(str, p))}={v!r}"[:60] for p, v in MUTATIONS]
)
def test_each_malformed_field_is_a_recorded_502(tmp_path: Path, path: tuple[str | int, ...], value: Any) -> None:
    status, body, recorded = call_with(tmp_path, orjson.dumps(mutated(path, value)))
    assert status == 502
    assert body["type"] == "error" and body["error"]["type"] == "api_error"
    assert recorded == "upstream_error"


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"null", b'"x"', b"\xff\xfe", b'{"choices": [{}]}'])
def test_an_answer_that_is_no_answer_is_a_recorded_502(tmp_path: Path, raw: bytes) -> None:
    status, _, recorded = call_with(tmp_path, raw)
    assert (status, recorded) == (502, "upstream_error")


@pytest.mark.parametrize(
    ("api_path", "body", "check"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "go"}]}, "error"),
        ("/v1/responses", {"model": "m", "input": "go"}, "error"),
        ("/v1beta/models/m:generateContent", {"contents": [{"role": "user", "parts": [{"text": "go"}]}]}, "error"),
    ],
)
def test_every_api_answers_a_null_logprob_in_its_own_error_shape(
    tmp_path: Path, api_path: str, body: dict[str, Any], check: str
) -> None:
    answer = orjson.dumps(mutated(("choices", 0, "logprobs", "content", 0, "logprob"), None))
    status, reply, recorded = call_with(tmp_path, answer, api_path, body)
    assert status == 502 and check in reply and recorded == "upstream_error"


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)  # what JSON-over-orjson can carry
    | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_PATHS = [p for p, _ in MUTATIONS]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(_PATHS), value=_JSON)
def test_any_json_anywhere_in_the_answer_is_an_answer_or_a_recorded_502(
    tmp_path: Path, path: tuple[str | int, ...], value: Any
) -> None:
    status, _, recorded = call_with(tmp_path, orjson.dumps(mutated(path, value)))
    assert (status, recorded) in ((200, "ok"), (502, "upstream_error"))
