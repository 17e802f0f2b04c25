"""The model-call gate for weight syncs (gateway/pause.py) through the real handler, with an upstream whose calls
the test holds and releases: drain waits, abort cancels and replays under a fresh rid, hang-ups at the gate."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from polar_cli.capture import CaptureRecord, CaptureWriter, read_session
from polar_cli.capture.store import session_file
from polar_cli.gateway.handler import Gateway, Reply
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.translate.dialects import SGLANG, VLLM, Dialect
from polar_cli.translate.upstream import UpstreamOptions
from polar_cli.wire.http11 import Request, Response
from tests.unit.gateway.test_handler import ANSWER

BODY = {"model": "gpt-x", "messages": [{"role": "user", "content": "go"}]}


class HeldUpstream:
    """Answers ANSWER; while ``hold`` is set a chat call waits until the test releases it (`release`)."""

    def __init__(self) -> None:
        self.hold = False
        self.chats: list[dict[str, Any]] = []  # the chat bodies, in the order their calls started
        self.cancelled: list[dict[str, Any]] = []
        self.aborts: list[str] = []
        self._release: asyncio.Event | None = None

    def release(self) -> None:
        assert self._release is not None
        self._release.set()

    async def post_json(self, path: str, body: bytes, *, session: str | None = None) -> Response:
        data = orjson.loads(body)
        if path == "/abort_request":
            self.aborts.append(data["rid"])
            return Response(200, "OK", {}, b"{}", True)
        self.chats.append(data)
        if self.hold:
            self._release = self._release or asyncio.Event()
            try:
                await self._release.wait()
            except asyncio.CancelledError:
                self.cancelled.append(data)
                raise
        return Response(200, "OK", {}, orjson.dumps(ANSWER), True)

    async def close(self) -> None:
        pass


def _request(key: str = "sk-1") -> Request:
    return Request(
        "POST", "/v1/chat/completions", "/v1/chat/completions", "", {"x-api-key": key}, orjson.dumps(BODY), True
    )


def _gateway(tmp_path: Path, dialect: Dialect = SGLANG) -> tuple[Gateway, HeldUpstream, CaptureWriter]:
    sessions = SessionRegistry()
    sessions.open("s", "sk-1")
    writer = CaptureWriter(tmp_path)
    upstream = HeldUpstream()
    options = UpstreamOptions(model="m", dialect=dialect)
    return Gateway(upstream=upstream, options=options, sessions=sessions, capture=writer), upstream, writer  # type: ignore[arg-type]


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(400):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def _records(writer: CaptureWriter, tmp_path: Path) -> list[CaptureRecord]:
    writer.close()
    return read_session(session_file(tmp_path, "s"))


def _run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 10))


def test_drain_waits_for_the_call_in_flight_and_holds_new_calls_until_resume(tmp_path: Path) -> None:
    gateway, upstream, writer = _gateway(tmp_path)
    gate = gateway.gate

    async def test() -> None:
        upstream.hold = True
        first = asyncio.create_task(gateway.handle(_request()))
        await _until(lambda: len(upstream.chats) == 1, "the first call upstream")
        pause = asyncio.create_task(gate.pause("drain"))
        second = asyncio.create_task(gateway.handle(_request()))
        await _until(lambda: gate.status()["waiting"] == 1, "the second call at the gate")
        await asyncio.sleep(0.05)
        assert not pause.done() and not first.done()  # the slow call is still being answered
        assert gate.status() == {
            "paused": True, "mode": "drain", "in_flight": 1, "waiting": 1, "replays_pending": 0,
            "weight_version": None,
        }  # fmt: skip
        upstream.hold = False
        upstream.release()
        assert await pause == 1
        assert (await first).status == 200
        await asyncio.sleep(0.05)
        assert len(upstream.chats) == 1 and not second.done()  # still held: the gate is closed
        gate.set_weight_version("v2")
        gate.resume()
        reply = await second
        assert reply.status == 200 and len(upstream.chats) == 2 and upstream.cancelled == []
        assert gate.status()["paused"] is False and gate.status()["waiting"] == 0

    _run(test)
    records = _records(writer, tmp_path)
    assert [(r.status, r.weight_version) for r in records] == [("ok", None), ("ok", "v2")]


def test_a_drain_past_its_timeout_raises_and_the_gate_stays_closed(tmp_path: Path) -> None:
    gateway, upstream, _ = _gateway(tmp_path)

    async def test() -> None:
        upstream.hold = True
        call = asyncio.create_task(gateway.handle(_request()))
        await _until(lambda: len(upstream.chats) == 1, "the call upstream")
        with pytest.raises(TimeoutError):
            await gateway.gate.pause("drain", timeout=0.05)
        assert gateway.gate.status()["paused"] is True and gateway.gate.status()["in_flight"] == 1
        # what did not drain can still be aborted, and goes again once the gate opens
        assert await gateway.gate.pause("abort") == 1
        upstream.hold = False
        gateway.gate.resume()
        assert (await call).status == 200

    _run(test)


@pytest.mark.parametrize("dialect", [SGLANG, VLLM], ids=lambda d: d.name)
def test_abort_cancels_the_call_in_flight_and_replays_it_after_resume(tmp_path: Path, dialect: Dialect) -> None:
    gateway, upstream, writer = _gateway(tmp_path, dialect)
    gate = gateway.gate
    replies: list[Reply] = []

    async def test() -> None:
        gate.set_weight_version("v1")
        replies.append(await gateway.handle(_request()))  # answered before the sync: the old weights
        upstream.hold = True
        call = asyncio.create_task(gateway.handle(_request()))
        await _until(lambda: len(upstream.chats) == 2, "the call upstream")
        assert await gate.pause("abort") == 1
        # the server saw the cancellation at once, and SGLang (only SGLang) was told to drop that rid
        assert upstream.cancelled == [upstream.chats[1]]
        rid = upstream.chats[1].get("rid")
        assert upstream.aborts == ([rid] if dialect.aborts else [])
        assert not call.done()  # the harness is none the wiser
        assert gate.status()["replays_pending"] == 1 and gate.status()["in_flight"] == 0
        gate.set_weight_version("v2")
        await asyncio.sleep(0.05)
        assert len(upstream.chats) == 2  # nothing goes while the gate is closed
        upstream.hold = False
        gate.resume()
        replies.append(await call)
        assert gate.status()["replays_pending"] == 0

    _run(test)
    assert len(upstream.chats) == 3
    first, aborted, replayed = upstream.chats
    if dialect.aborts:
        assert replayed["rid"] == f"{aborted['rid']}-r1" and aborted["rid"] != first["rid"]
    else:
        assert "rid" not in replayed
    assert {k: v for k, v in replayed.items() if k != "rid"} == {k: v for k, v in aborted.items() if k != "rid"}
    assert [r.status for r in replies] == [200, 200]
    answer = orjson.loads(replies[1].body)
    assert answer["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "Bash"
    assert answer["id"] == orjson.loads(replies[0].body)["id"][:-1] + "1"  # the call's own id, not the replay's rid
    records = _records(writer, tmp_path)
    # one record per harness call: the aborted attempt is not one
    assert [(r.seq, r.status, r.weight_version) for r in records] == [(0, "ok", "v1"), (1, "ok", "v2")]
    assert records[1].response_ids == [7, 8]
    assert records[1].normalized is not None and records[1].normalized.get("rid") == replayed.get("rid")


def test_a_hang_up_at_the_closed_gate_is_a_client_error_and_sends_nothing(tmp_path: Path) -> None:
    gateway, upstream, writer = _gateway(tmp_path)
    gate = gateway.gate

    async def test() -> None:
        assert await gate.pause("drain") == 0
        call = asyncio.create_task(gateway.handle(_request()))
        await _until(lambda: gate.status()["waiting"] == 1, "the call at the gate")
        call.cancel()  # what the server does when the harness hangs up
        with pytest.raises(asyncio.CancelledError):
            await call
        assert gate.status()["waiting"] == 0
        gate.resume()
        await asyncio.sleep(0.05)

    _run(test)
    assert upstream.chats == [] and upstream.aborts == []
    (record,) = _records(writer, tmp_path)
    assert record.status == "client_error" and "disconnected" in (record.error or "")
    assert record.weight_version is None and record.prompt_ids == []


def test_a_hang_up_while_the_replay_is_pending_sends_nothing_more(tmp_path: Path) -> None:
    gateway, upstream, writer = _gateway(tmp_path)
    gate = gateway.gate

    async def test() -> None:
        upstream.hold = True
        call = asyncio.create_task(gateway.handle(_request()))
        await _until(lambda: len(upstream.chats) == 1, "the call upstream")
        assert await gate.pause("abort") == 1
        await _until(lambda: gate.status()["replays_pending"] == 1, "the replay at the gate")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert gate.status()["replays_pending"] == 0
        gate.resume()
        await asyncio.sleep(0.05)

    _run(test)
    assert len(upstream.chats) == 1 and upstream.aborts == [upstream.chats[0]["rid"]]  # the gate's abort only
    (record,) = _records(writer, tmp_path)
    assert record.status == "client_error"


def test_a_hang_up_while_the_call_is_in_flight_cancels_it_and_aborts_its_rid(tmp_path: Path) -> None:
    gateway, upstream, writer = _gateway(tmp_path)

    async def test() -> None:
        upstream.hold = True
        call = asyncio.create_task(gateway.handle(_request()))
        await _until(lambda: len(upstream.chats) == 1, "the call upstream")
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await _until(lambda: upstream.aborts != [], "the abort")
        assert gateway.gate.status()["in_flight"] == 0

    _run(test)
    assert upstream.cancelled == upstream.chats and upstream.aborts == [upstream.chats[0]["rid"]]
    (record,) = _records(writer, tmp_path)
    assert record.status == "client_error"


def test_a_pause_while_paused_aborts_what_is_then_in_flight_and_stays_closed(tmp_path: Path) -> None:
    gateway, upstream, _ = _gateway(tmp_path)
    gate = gateway.gate

    async def test() -> None:
        assert await gate.pause("drain") == 0
        assert await gate.pause("abort") == 0
        assert gate.status()["paused"] is True and gate.status()["mode"] == "abort"
        call = asyncio.create_task(gateway.handle(_request()))
        await _until(lambda: gate.status()["waiting"] == 1, "the call at the gate")
        assert upstream.chats == []
        gate.resume()
        assert (await call).status == 200
        with pytest.raises(ValueError, match="drain or abort"):
            await gate.pause("stop")  # type: ignore[arg-type]

    _run(test)
