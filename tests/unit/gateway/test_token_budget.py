"""A session's token budget (`gateway.budget`): each call's max_tokens is lowered to what is left, and once it is used
up the harness gets a context-length error in its own API, recorded as ``token_budget``."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from polar_cli.capture import CaptureWriter, read_session
from polar_cli.capture.store import session_file
from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.translate.upstream import UpstreamOptions
from tests.unit.gateway.test_handler import FakeUpstream, request

MESSAGES = {"model": "claude", "max_tokens": 32000, "messages": [{"role": "user", "content": "go"}]}
CHAT = {"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "go"}]}


def test_max_tokens_shrinks_to_the_budget_left_then_calls_are_refused_as_too_long(tmp_path: Path) -> None:
    sessions = SessionRegistry()
    sessions.open("s", "sk-1", token_budget=5)
    sessions.open("free", "sk-2")
    writer = CaptureWriter(tmp_path)
    upstream = FakeUpstream()  # answers 2 sampled tokens a call
    gateway = Gateway(upstream=upstream, options=UpstreamOptions(model="m"), sessions=sessions, capture=writer)  # type: ignore[arg-type]

    async def calls() -> list[tuple[int, dict]]:
        out = []
        for path, body in [("/v1/messages", MESSAGES)] * 4 + [("/v1/chat/completions", CHAT)]:
            reply = await gateway.handle(request(path, body))
            out.append((reply.status, orjson.loads(reply.body)))
        free = await gateway.handle(request("/v1/messages", MESSAGES, key="sk-2"))
        assert free.status == 200
        return out

    replies = asyncio.run(calls())
    assert [b["max_tokens"] for b in upstream.bodies] == [5, 3, 1, 32000]  # the last: the session without a budget
    assert [s for s, _ in replies] == [200, 200, 200, 400, 400]
    anthropic, openai = replies[3][1], replies[4][1]
    assert anthropic["error"]["type"] == "invalid_request_error"
    assert anthropic["error"]["message"].startswith("prompt is too long")
    assert "token budget of 5" in openai["error"]["message"]
    writer.close()
    records = read_session(session_file(tmp_path, "s"))
    assert [r.status for r in records] == ["ok", "ok", "ok", "client_error", "client_error"]
    assert records[-1].error_kind == "token_budget"
