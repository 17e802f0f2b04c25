"""The gateway handler without sockets: a fake upstream answering the same canned SGLang body every call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from polar_cli.capture import CaptureWriter, read_session
from polar_cli.capture.store import session_file
from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.translate.upstream import UpstreamOptions
from polar_cli.wire.http11 import Request, Response

ANSWER = {
    "id": "x",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [
        {
            "index": 0,
            # servers number tool calls per answer: the same id comes back every turn
            "message": {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}],
            },
            "logprobs": {"content": [{"token": "a", "logprob": -0.1}, {"token": "b", "logprob": -0.2}]},
            "finish_reason": "tool_calls",
            "prompt_token_ids": [1, 2, 3],
            "response_token_ids": [7, 8],
        }
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
}


class FakeUpstream:
    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.sessions: list[str | None] = []

    async def post_json(self, path: str, body: bytes, *, session: str | None = None) -> Response:
        self.bodies.append(orjson.loads(body))
        self.sessions.append(session)
        return Response(200, "OK", {}, orjson.dumps(ANSWER), True)

    async def close(self) -> None:
        pass


def request(path: str, body: dict, key: str = "sk-1") -> Request:
    return Request("POST", path, path, "", {"x-api-key": key}, orjson.dumps(body), True)


def test_tool_call_ids_are_unique_across_turns_and_calls_are_captured(tmp_path: Path) -> None:
    sessions = SessionRegistry()
    sessions.open("s", "sk-1")
    writer = CaptureWriter(tmp_path)
    upstream = FakeUpstream()
    gateway = Gateway(upstream=upstream, options=UpstreamOptions(model="m"), sessions=sessions, capture=writer)  # type: ignore[arg-type]
    body = {"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "go"}]}

    async def calls() -> list[dict]:
        replies = [await gateway.handle(request("/v1/messages", body)) for _ in range(3)]
        return [orjson.loads(r.body) for r in replies]

    answers = asyncio.run(calls())
    ids = [a["content"][-1]["id"] for a in answers]
    assert len(set(ids)) == 3 and all(i.startswith("toolu_") for i in ids)
    # the upstream learns which session each call is for from the call itself (in-process engines answer per session)
    assert upstream.sessions == ["s", "s", "s"]
    writer.close()
    records = read_session(session_file(tmp_path, "s"))
    assert [r.seq for r in records] == [0, 1, 2]
    assert records[0].response_ids == [7, 8] and records[0].response_logprobs == [-0.1, -0.2]
    assert records[0].request == body and records[0].request_headers == {"x-api-key": "[redacted]"}


def test_unknown_key_health_and_unknown_path(tmp_path: Path) -> None:
    gateway = Gateway(upstream=FakeUpstream(), options=UpstreamOptions(), sessions=SessionRegistry(), capture=None)  # type: ignore[arg-type]

    async def run() -> list:
        return [
            await gateway.handle(request("/v1/messages", {"model": "m"}, key="sk-unknown")),
            await gateway.handle(Request("GET", "/health", "/health", "", {}, b"", True)),
            await gateway.handle(request("/v1/models", {})),
            await gateway.handle(Request("GET", "/v1/chat/completions", "/v1/chat/completions", "", {}, b"", True)),
        ]

    denied, health, missing, wrong_method = asyncio.run(run())
    assert denied.status == 401 and orjson.loads(denied.body)["error"]["type"] == "authentication_error"
    assert health.status == 200
    assert missing.status == 404 and "error" in orjson.loads(missing.body)
    assert wrong_method.status == 405 and orjson.loads(wrong_method.body)["error"]["type"] == "invalid_request_error"


def test_google_streams_the_framing_its_route_asked_for() -> None:
    sessions = SessionRegistry()
    sessions.open("g", "sk-g")
    gateway = Gateway(upstream=FakeUpstream(), options=UpstreamOptions(model="m"), sessions=sessions, capture=None)  # type: ignore[arg-type]
    body = {"contents": [{"role": "user", "parts": [{"text": "go"}]}]}
    path = "/v1beta/models/gemini-x:streamGenerateContent"

    def call(query: str) -> Any:
        req = Request("POST", f"{path}?{query}", path, query, {"x-goog-api-key": "sk-g"}, orjson.dumps(body), True)
        return asyncio.run(gateway.handle(req))

    sse = call("alt=sse")
    assert sse.content_type == "text/event-stream" and sse.stream and all(f.startswith(b"data: ") for f in sse.stream)
    array = call("key=sk-g")
    assert array.content_type == "application/json" and array.stream is not None and len(array.stream) == 1
    chunks = orjson.loads(array.stream[0])
    assert (
        isinstance(chunks, list) and chunks[0]["candidates"][0]["content"]["parts"][0]["functionCall"]["name"] == "Bash"
    )
