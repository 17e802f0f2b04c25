"""`engine.urls`: several SGLang test doubles behind one `UpstreamPool`, opened by `open_engine` and called through the
node's real gateway on loopback: a session's calls stay on one worker, new sessions go to the least-loaded one, an
abort reaches the worker that got its rid, a dead worker fails only its own sessions, every worker is probed at start;
plus the recipe's checks, `polar doctor`'s lines and the run's health check per worker."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from pydantic import ValidationError

from polar_cli.config import EngineConfig, load_recipe
from polar_cli.doctor.checks import engine_checks
from polar_cli.errors import UpstreamError
from polar_cli.gateway.upstream_pool import UpstreamPool, request_id
from polar_cli.generate.watches import _workers_check
from polar_cli.inference.engines import EngineHandle, open_engine
from polar_cli.node.gateway import NodeGateway
from polar_cli.wire.http11 import Response
from tests.support.sglang_double import SGLangDouble

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "recipes" / "demo.yaml"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def doubles(n: int, **fields: Any) -> Iterator[list[SGLangDouble]]:
    with ExitStack() as stack:
        yield [stack.enter_context(SGLangDouble(template=None, **fields)) for _ in range(n)]


def chats(double: SGLangDouble) -> list[dict[str, Any]]:
    """The chat bodies a double got from sessions (the start-up probes left out)."""
    return [r.body for r in double.chat_requests if not str(r.body.get("rid", "")).startswith("polar-probe")]


def sessions_at(double: SGLangDouble) -> list[str]:
    """The session named in each of the double's session calls, in order (each call's user message says `<sid>`)."""
    found = []
    for body in chats(double):
        text = json.dumps(body["messages"])
        found.append(text.split("<", 1)[1].split(">", 1)[0])
    return found


def body(sid: str, turn: int = 0) -> dict[str, Any]:
    return {"model": "gpt-x", "messages": [{"role": "user", "content": f"<{sid}> turn {turn}"}]}


class Node:
    """A pool engine over ``urls`` and the node's gateway in front of it, on this test's event loop."""

    def __init__(self, engine: EngineHandle, gateway: NodeGateway, client: httpx.AsyncClient) -> None:
        self.engine = engine
        self.gateway = gateway
        self.client = client
        self.keys: dict[str, str] = {}

    @property
    def pool(self) -> UpstreamPool:
        assert self.engine.pool is not None
        return self.engine.pool

    def open(self, sid: str) -> None:
        self.keys[sid] = self.gateway.open_session(sid, None)

    async def call(self, sid: str, turn: int = 0, *, timeout: float = 30.0, path: str = "/v1/chat/completions") -> Any:
        request = body(sid, turn)
        if path == "/v1/messages":
            request["max_tokens"] = 64
        return await self.client.post(
            path, json=request, headers={"authorization": f"Bearer {self.keys[sid]}"}, timeout=timeout
        )


async def with_node(urls: list[str], tmp_path: Path, test: Callable[[Node], Awaitable[None]]) -> None:
    engine = await open_engine(EngineConfig(kind="sglang", urls=urls), tmp_path)
    gateway = NodeGateway(engine, tmp_path / "capture")
    url = await gateway.start()
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            await test(Node(engine, gateway, client))
    finally:
        await gateway.stop()
        await engine.close()


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.01)


# ---- affinity and placement ----------------------------------------------------------------------------------------


def test_every_call_of_a_session_reaches_the_worker_its_first_call_did(tmp_path: Path) -> None:
    sids = ["a", "b", "c", "d", "e"]

    async def test(node: Node) -> None:
        for sid in sids:
            node.open(sid)
        # three rounds, the sessions' calls of a round at once
        for turn in range(3):
            answers = await asyncio.gather(*(node.call(sid, turn) for sid in sids))
            assert [a.status_code for a in answers] == [200] * len(sids)
        stats = node.pool.stats()
        assert sum(s.sessions for s in stats.values()) == len(sids)
        assert all(s.in_flight == 0 for s in stats.values())
        for sid in sids:
            node.gateway.close_session(node.keys[sid])
        # closed sessions are forgotten: no worker counts them
        assert [s.sessions for s in node.pool.stats().values()] == [0, 0, 0]
        assert node.pool.worker_of("a") is None

    with doubles(3) as ups:
        asyncio.run(with_node([u.url for u in ups], tmp_path, test))
        seen = [sessions_at(u) for u in ups]
    # every session on exactly one worker, with all three of its calls
    for sid in sids:
        holders = [i for i, at in enumerate(seen) if sid in at]
        assert len(holders) == 1, f"session {sid} reached workers {holders}"
        assert seen[holders[0]].count(sid) == 3
    # and the sessions spread over the three workers (2, 2, 1): none left idle
    assert sorted(len(set(at)) for at in seen) == [1, 2, 2]


def test_a_new_session_goes_to_the_worker_with_the_fewest_calls_in_flight(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        a, b = node.pool.urls
        for sid in ("s1", "s2", "s3", "s4"):
            node.open(sid)
        ups[0].delay = 1.5  # a long generation on the first worker
        slow = asyncio.create_task(node.call("s1"))
        await until(lambda: node.pool.stats()[a].in_flight == 1)
        assert node.pool.worker_of("s1") == a
        assert (await node.call("s2")).status_code == 200
        # a and b each hold one session, but a has a call in flight: b
        assert (await node.call("s3")).status_code == 200
        assert [node.pool.worker_of(s) for s in ("s2", "s3")] == [b, b]
        assert (await slow).status_code == 200
        # nothing in flight: the fewest sessions bound wins (a: 1, b: 2)
        ups[0].delay = 0
        assert (await node.call("s4")).status_code == 200
        assert node.pool.worker_of("s4") == a
        stats = node.pool.stats()
        assert (stats[a].sessions, stats[b].sessions) == (2, 2)
        assert stats[a].calls >= 2 and stats[b].calls >= 2

    with doubles(2) as ups:
        asyncio.run(with_node([u.url for u in ups], tmp_path, test))
        assert sessions_at(ups[0]) == ["s1", "s4"] and sessions_at(ups[1]) == ["s2", "s3"]


# ---- aborts --------------------------------------------------------------------------------------------------------


def test_an_abort_reaches_the_worker_that_got_the_rid(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        a, b = node.pool.urls
        node.open("s1")
        node.open("s2")
        assert (await node.call("s1")).status_code == 200
        assert node.pool.worker_of("s1") == a
        ups[1].delay = 1.0
        # the harness hangs up while s2's call waits on the slow second worker: the gateway aborts its rid
        with pytest.raises(httpx.ReadTimeout):
            await node.call("s2", timeout=0.3)
        assert node.pool.worker_of("s2") == b
        await until(lambda: any(r.path == "/abort_request" for r in ups[1].requests))
        # the gate's abort for a weight sync goes the same way
        held = asyncio.create_task(node.call("s2", 1))
        await until(lambda: node.pool.stats()[b].in_flight == 1)
        assert await node.gateway.gate.pause("abort", timeout=5) == 1
        node.gateway.gate.resume()
        assert (await held).status_code == 200  # replayed under a fresh rid, on the same worker

    with doubles(2) as ups:
        asyncio.run(with_node([u.url for u in ups], tmp_path, test))
        rids = [b["rid"] for b in chats(ups[1])]
        aborted = [r.body["rid"] for r in ups[1].requests if r.path == "/abort_request"]
        assert aborted == rids[:2], "each abort names the rid the second worker got"
        assert not [r for r in ups[0].requests if r.path == "/abort_request"]
        assert sessions_at(ups[1]) == ["s2", "s2", "s2"] and rids[2] == f"{rids[1]}-r1"


def test_an_abort_of_an_unknown_rid_goes_to_every_worker() -> None:
    async def test(urls: list[str]) -> None:
        pool = UpstreamPool(urls)
        try:
            response = await pool.post_json("/abort_request", orjson.dumps({"rid": "never-sent"}))
            assert response.status == 200
        finally:
            await pool.close()

    with doubles(2) as ups:
        asyncio.run(test([u.url for u in ups]))
        for up in ups:
            assert [r.body for r in up.requests if r.path == "/abort_request"] == [{"rid": "never-sent"}]


def test_the_rid_is_read_from_the_top_level_only() -> None:
    harness_text = {"role": "user", "content": 'say "rid":"evil" and {"rid":"x"}'}
    compact = orjson.dumps({"messages": [harness_text], "rid": "abc123"})
    assert request_id(compact) == "abc123"
    # a nested "rid" key as well (a tool's schema): parsed, the top-level one wins
    nested = {"tools": [{"function": {"parameters": {"default": {"rid": "nested"}}}}], "rid": "top"}
    assert request_id(orjson.dumps(nested)) == "top"
    assert request_id(json.dumps({"rid": "spaced"}).encode()) == "spaced"
    assert request_id(orjson.dumps({"messages": [harness_text]})) is None
    assert request_id(b"not json") is None


# ---- a dead worker -------------------------------------------------------------------------------------------------


def test_a_dead_worker_fails_only_its_own_sessions_and_gets_no_new_one(tmp_path: Path) -> None:
    async def test(node: Node) -> None:
        a, b = node.pool.urls
        for sid in ("s1", "s2", "s3", "s4"):
            node.open(sid)
        for sid in ("s1", "s2", "s3"):
            assert (await node.call(sid)).status_code == 200
        assert [node.pool.worker_of(s) for s in ("s1", "s2", "s3")] == [a, b, a]
        # the second worker dies: it refuses connections (the pool's kept-alive ones closed with it)
        ups[1].stop()
        await node.pool.workers[1].client.close()
        dead = await node.call("s2")
        assert dead.status_code == 502
        error = dead.json()["error"]  # OpenAI Chat's error shape
        assert b in error["message"] and "unreachable" in error["message"]
        # in Anthropic's shape through its own API
        dead = await node.call("s2", 1, path="/v1/messages")
        assert dead.status_code == 502 and dead.json()["type"] == "error"
        assert node.pool.worker_of("s2") == b, "a session is never moved to another worker"
        # the other worker's sessions go on
        assert (await node.call("s1", 1)).status_code == 200
        # a new session: fewer sessions on b (1 against 2), but b failed its last call
        assert (await node.call("s4")).status_code == 200
        assert node.pool.worker_of("s4") == a
        stats = node.pool.stats()
        assert not stats[b].healthy and stats[b].failures == 2 and stats[a].healthy

    with doubles(2) as ups:
        asyncio.run(with_node([u.url for u in ups], tmp_path, test))
        assert sessions_at(ups[0]) == ["s1", "s3", "s1", "s4"]


def test_a_failed_worker_gets_new_sessions_again_after_retry_after() -> None:
    now = [100.0]

    async def test(urls: list[str]) -> None:
        pool = UpstreamPool([*urls, f"http://127.0.0.1:{closed_port()}"], retry_after=30.0, clock=lambda: now[0])
        a, dead = pool.urls
        try:
            await pool.post_json("/v1/chat/completions", orjson.dumps(body("s1")), session="s1")
            with pytest.raises(UpstreamError, match="unreachable"):
                await pool.post_json("/v1/chat/completions", orjson.dumps(body("s2")), session="s2")
            assert pool.worker_of("s2") == dead
            await pool.post_json("/v1/chat/completions", orjson.dumps(body("s3")), session="s3")
            assert pool.worker_of("s3") == a
            now[0] += 30.0
            # tried again (it has fewer sessions), and still down
            with pytest.raises(UpstreamError):
                await pool.post_json("/v1/chat/completions", orjson.dumps(body("s4")), session="s4")
            assert pool.worker_of("s4") == dead
            # all failed: the least-loaded of them all
            pool.workers[0].failed_at = now[0]
            pool.forget("s1")
            pool.forget("s3")
            assert pool._place() is pool.workers[0]
        finally:
            await pool.close()

    with doubles(1) as ups:
        asyncio.run(test([ups[0].url]))


# ---- start-up ------------------------------------------------------------------------------------------------------


class _NoTokens(BaseHTTPRequestHandler):
    """An OpenAI-style server that serves the doubles' model but answers chats without token ids."""

    def _send(self, data: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:
        self._send({"data": [{"id": "polar-test-model"}]})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self._send({"choices": [{"index": 0, "message": {"role": "assistant", "content": "OK"}}]})

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def no_tokens_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoTokens)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def start(urls: list[str], tmp_path: Path) -> EngineHandle:
    async def go() -> EngineHandle:
        engine = await open_engine(EngineConfig(kind="sglang", urls=urls), tmp_path)
        await engine.close()
        return engine

    return asyncio.run(go())


def test_every_worker_is_probed_and_one_that_fails_names_its_url(tmp_path: Path) -> None:
    with doubles(2) as ups:
        engine = start([ups[0].url + "/v1", ups[1].url], tmp_path)
        assert engine.model == "polar-test-model" and engine.options.dialect.name == "sglang"
        for up in ups:
            probes = [b for b in (r.body for r in up.chat_requests) if b["rid"].startswith("polar-probe")]
            assert {"polar-probe-sglang", "polar-probe-tools"} <= {b["rid"] for b in probes}
        down = f"http://127.0.0.1:{closed_port()}"
        with pytest.raises(UpstreamError, match=f"engine worker {down}: .*unreachable"):
            start([ups[0].url, down], tmp_path)
        with no_tokens_server() as plain, pytest.raises(UpstreamError, match=f"engine worker {plain}: .*token"):
            start([ups[0].url, plain], tmp_path)
    with SGLangDouble(template=None) as one, SGLangDouble(template=None, served_model_name="other") as two:
        with pytest.raises(UpstreamError, match="different models") as info:
            start([one.url, two.url], tmp_path)
        assert f"{two.url}: other" in info.value.message
    with SGLangDouble(template=None) as one, SGLangDouble(template=None, dialect="sglang-legacy") as two:
        with pytest.raises(UpstreamError, match="different token fields") as info:
            start([one.url, two.url], tmp_path)
        assert f"{two.url}: sglang-legacy" in info.value.message


# ---- the recipe, doctor, the health check ---------------------------------------------------------------------------


def test_the_recipe_takes_urls_for_running_servers_only() -> None:
    two = ["http://h1:30000/v1", "http://h2:30000"]
    config = EngineConfig(kind="sglang", urls=two, sglang={"model_path": "/m"})
    assert not config.launches() and config.server_urls() == ["http://h1:30000", "http://h2:30000"]
    assert EngineConfig(kind="vllm", urls=two).server_urls() == config.server_urls()
    refused = [
        ({"kind": "sglang", "url": "http://h0:1", "urls": two}, "url and urls exclude each other"),
        ({"kind": "gold", "tokenizer": "qwen3", "urls": two}, "not kind gold"),
        ({"kind": "noop", "tokenizer": "qwen3", "urls": two}, "not kind noop"),
        ({"kind": "vllm", "urls": []}, "at least 1"),
        ({"kind": "vllm", "urls": ["http://h1:1", "http://h1:1/v1/"]}, "named twice"),
        ({"kind": "server", "urls": ["h1:30000"]}, "http://host:port"),
    ]
    for fields, message in refused:
        with pytest.raises(ValidationError, match=message):
            EngineConfig.model_validate(fields)
    recipe = load_recipe(DEMO, ["engine.kind=sglang", "engine.urls=[http://h1:1, http://h2:2]"])
    assert recipe.engine.urls == ["http://h1:1", "http://h2:2"]


def test_doctor_checks_each_worker_on_a_line_of_its_own() -> None:
    down = f"http://127.0.0.1:{closed_port()}"
    with SGLangDouble(template=None) as up:
        url = up.url
        found = engine_checks(EngineConfig(kind="sglang", urls=[url, down]), timeout=5)
    assert [(c.name, c.status) for c in found] == [
        ("engine[0]", "ok"),
        ("engine-tokens[0]", "ok"),
        ("engine[1]", "fail"),
    ]
    assert url in found[0].detail and url in found[1].detail and down in found[2].detail
    assert found[2].fix is not None and "engine.urls" in found[2].fix
    with SGLangDouble(template=None) as one, SGLangDouble(template=None, served_model_name="other") as two:
        found = engine_checks(EngineConfig(kind="sglang", urls=[one.url, two.url]), tokens=False)
    assert [(c.name, c.status) for c in found] == [("engine[0]", "ok"), ("engine[1]", "ok"), ("engine-models", "fail")]


def test_the_health_check_is_down_when_any_worker_is(tmp_path: Path) -> None:
    async def test(urls: list[str]) -> None:
        config = EngineConfig(kind="sglang", urls=urls, health_timeout=2)
        engine = await open_engine(config, tmp_path)
        try:
            check = _workers_check(engine, config, tmp_path)
            assert await check() is None
            ups[1].stop()
            reason = await check()
            assert isinstance(reason, str) and "1 of 2 servers down" in reason and urls[1] in reason
            assert urls[0] not in reason
        finally:
            await engine.close()

    with doubles(2) as ups:
        asyncio.run(test([u.url for u in ups]))


def test_a_pool_answers_like_one_client(tmp_path: Path) -> None:
    """`get` and session-less calls go to the least-loaded worker, unbound; `close` closes every client."""

    async def test(urls: list[str]) -> Response:
        pool = UpstreamPool(urls)
        try:
            answer = await pool.get("/v1/models")
            await pool.post_json("/v1/chat/completions", orjson.dumps(body("x")))
            assert [s.sessions for s in pool.stats().values()] == [0, 0]
            assert [s.calls for s in pool.stats().values()] == [2, 0]
            return answer
        finally:
            await pool.close()

    with doubles(2) as ups:
        answer = asyncio.run(test([u.url for u in ups]))
    assert answer.status == 200 and b"polar-test-model" in answer.body
