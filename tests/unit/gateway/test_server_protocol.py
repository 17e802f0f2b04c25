"""The gateway's HTTP/1.1 protocol without a socket: `GatewayProtocol` driven through a fake transport.

The protocol object gets its asyncio callbacks (``connection_made``, ``data_received``, ``eof_received``,
``connection_lost``) straight from the test, inside a running event loop, as uvicorn's protocol tests do; the
transport records what is written and whether it was closed, and a stub gateway answers canned `Reply` objects. The
socket tier (tests/integration/gateway/test_fuzz.py) throws hostile bytes at a real listening server; this tier pins
down the connection's behaviour step by step: framing, keep-alive, pipelining, hang-ups and timers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import orjson
import pytest

from polar_cli.gateway import server
from polar_cli.gateway.handler import CallState, Gateway, Reply
from polar_cli.gateway.server import GatewayProtocol, ServerLimits
from polar_cli.wire.http11 import CONTINUE, LAST_CHUNK, NEED_DATA, Limits, Request, Response, ResponseParser

OK = Reply(200, b'{"ok":true}')


class FakeTransport(asyncio.Transport):
    """Collects what the protocol writes; ``close`` reports the loss to the protocol on the next loop turn, as the
    event loop's socket transports do."""

    def __init__(self, protocol: asyncio.Protocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.written = bytearray()
        self.closed = False
        self.writes_after_close = 0
        self.paused = False
        self.pauses = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closed:
            self.writes_after_close += 1
        self.written += data

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False

    def is_reading(self) -> bool:
        return not self.paused

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50123), "sockname": ("127.0.0.1", 8080)}.get(name, default)


Answer = Reply | Callable[[Request, CallState], Awaitable[Reply]]


class StubGateway:
    """Answers each request with the next canned reply (or awaits the next callable); OK once they run out."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.requests: list[Request] = []
        self.states: list[CallState] = []
        self.cancelled = 0

    def error_body(self, path: str, status: int, kind: str, message: str) -> bytes:
        # the gateway's own: the error in the API shape the path suggests
        return Gateway.error_body(self, path, status, kind, message)  # type: ignore[arg-type]

    async def handle(self, request: Request, state: CallState | None = None) -> Reply:
        assert state is not None, "the server passes each call its CallState"
        self.requests.append(request)
        self.states.append(state)
        answer = self.answers.pop(0) if self.answers else OK
        if isinstance(answer, Reply):
            return answer
        try:
            return await answer(request, state)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def close(self) -> None:
        pass


class Connection:
    """One protocol object on a fake transport."""

    def __init__(self, gateway: StubGateway, limits: ServerLimits | None = None) -> None:
        self.gateway = gateway
        self.connections: set[GatewayProtocol] = set()
        self.protocol = GatewayProtocol(gateway, limits or ServerLimits(), self.connections)  # type: ignore[arg-type]
        self.transport = FakeTransport(self.protocol)
        self.protocol.connection_made(self.transport)

    def feed(self, data: bytes) -> None:
        self.protocol.data_received(data)

    async def until(self, condition: Callable[[], bool], timeout: float = 2.0) -> None:
        """Let the loop run until ``condition`` holds."""
        async with asyncio.timeout(timeout):
            while not condition():
                await asyncio.sleep(0)

    async def replies(self, count: int) -> list[Response]:
        await self.until(lambda: len(parse(self.transport.written)) >= count)
        return parse(self.transport.written)

    async def settle(self, turns: int = 20) -> None:
        for _ in range(turns):
            await asyncio.sleep(0)


def parse(raw: bytes | bytearray) -> list[Response]:
    """The complete responses in ``raw`` (chunked bodies joined)."""
    parser = ResponseParser(Limits())
    parser.receive_data(bytes(raw))
    out = []
    while (event := parser.next_event()) is not NEED_DATA:
        assert isinstance(event, Response)
        out.append(event)
    return out


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(test())


def post(path: str = "/v1/chat/completions", body: bytes = b'{"model":"m"}', *headers: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "host: x", f"content-length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def waits_for(event: asyncio.Event, reply: Reply = OK, *, upstream: bool = False) -> Answer:
    """A handler that blocks on ``event`` (marked as waiting on the model when ``upstream``), then answers."""

    async def answer(request: Request, state: CallState) -> Reply:
        state.waiting_upstream = upstream
        try:
            await event.wait()
        finally:
            state.waiting_upstream = False
        return reply

    return answer


# --- whole, byte by byte, pipelined -------------------------------------------------------------------------------


def test_a_request_fed_at_once_is_answered_and_the_connection_kept() -> None:
    async def test() -> None:
        conn = Connection(StubGateway(Reply(201, b'{"id":1}')))
        assert conn.connections == {conn.protocol}
        conn.feed(post("/v1/messages?beta=true", b'{"a":1}', "x-api-key: k"))
        (reply,) = await conn.replies(1)
        (request,) = conn.gateway.requests
        assert (request.method, request.path, request.query, request.body) == (
            "POST",
            "/v1/messages",
            "beta=true",
            b'{"a":1}',
        )
        assert request.headers["x-api-key"] == "k" and request.keep_alive
        assert (reply.status, reply.body, reply.keep_alive) == (201, b'{"id":1}', True)
        assert reply.headers["content-type"] == "application/json"
        assert reply.headers["content-length"] == "8"
        await conn.settle()
        assert not conn.transport.closed

    run(test)


def test_a_request_fed_byte_by_byte_is_answered_once_it_is_complete() -> None:
    async def test() -> None:
        conn = Connection(StubGateway())
        raw = post(body=b'{"model":"m","messages":[]}')
        for byte in raw[:-1]:
            conn.feed(bytes([byte]))
            await asyncio.sleep(0)
        assert conn.gateway.requests == [] and not conn.transport.written
        conn.feed(raw[-1:])
        (reply,) = await conn.replies(1)
        assert reply.status == 200 and conn.gateway.requests[0].body == b'{"model":"m","messages":[]}'

    run(test)


def test_pipelined_requests_are_served_one_at_a_time_in_order() -> None:
    async def test() -> None:
        first = asyncio.Event()
        conn = Connection(StubGateway(waits_for(first, Reply(200, b"1")), Reply(200, b"2"), Reply(200, b"3")))
        conn.feed(post(body=b"a") + post(body=b"b") + post(body=b"c")[:20])
        await conn.settle()
        assert [r.body for r in conn.gateway.requests] == [b"a"]  # the second waits for the first's answer
        assert not conn.transport.written
        first.set()
        await conn.replies(2)
        conn.feed(post(body=b"c")[20:])
        replies = await conn.replies(3)
        assert [r.body for r in replies] == [b"1", b"2", b"3"]
        assert [r.body for r in conn.gateway.requests] == [b"a", b"b", b"c"]
        assert all(r.keep_alive for r in replies) and not conn.transport.closed

    run(test)


def test_reading_pauses_while_too_much_is_pipelined_and_resumes_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "PIPELINE_BUFFER", 200)

    async def test() -> None:
        first = asyncio.Event()
        conn = Connection(StubGateway(waits_for(first)))
        conn.feed(post(body=b"a"))
        await conn.until(lambda: bool(conn.gateway.requests))
        conn.feed(post(body=b"b" * 10))
        assert not conn.transport.paused  # within the buffer
        conn.feed(post(body=b"c" * 150))
        assert conn.transport.paused
        first.set()
        assert len(await conn.replies(3)) == 3
        assert not conn.transport.paused and conn.transport.pauses == 1

    run(test)


# --- malformed requests --------------------------------------------------------------------------------------------


def _anthropic_shape(body: Any, kind: str) -> bool:
    return body["type"] == "error" and body["error"]["type"] == kind and isinstance(body["error"]["message"], str)


def _openai_shape(body: Any, kind: str) -> bool:
    return body["error"]["type"] == kind and isinstance(body["error"]["message"], str)


def _google_shape(body: Any, kind: str) -> bool:
    return body["error"]["status"] == kind and isinstance(body["error"]["message"], str)


SHAPES = {
    "/v1/messages": (_anthropic_shape, "invalid_request_error"),
    "/v1/chat/completions": (_openai_shape, "invalid_request_error"),
    "/v1/responses": (_openai_shape, "invalid_request_error"),
    "/v1beta/models/m:streamGenerateContent": (_google_shape, "INVALID_ARGUMENT"),
}


@pytest.mark.parametrize("path", list(SHAPES))
@pytest.mark.parametrize(
    ("head", "status"),
    [
        ("POST {path} HTTP/1.1\r\nhost: x\r\nno colon here\r\n\r\n", 400),
        ("POST {path} HTTP/1.1\r\ncontent-length: 1\r\ntransfer-encoding: chunked\r\n\r\n", 400),
        ("POST {path} HTTP/1.1\r\ncontent-length: -5\r\n\r\n", 400),
        ("POST {path} HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n", 501),
    ],
)
def test_a_malformed_request_gets_a_4xx_in_its_paths_api_shape_and_the_connection_closes(
    path: str, head: str, status: int
) -> None:
    async def test() -> None:
        conn = Connection(StubGateway())
        # a well-formed request after the broken one is never read: after a parse error the connection is done
        conn.feed(head.format(path=path).encode() + post(path))
        (reply,) = await conn.replies(1)
        await conn.settle()
        assert reply.status == status and not reply.keep_alive and reply.headers["connection"] == "close"
        shape, kind = SHAPES[path]
        body = orjson.loads(reply.body)
        assert shape(body, kind), body
        assert status == (body["error"].get("code") or status)  # Google repeats the status in the body
        assert conn.gateway.requests == []
        assert conn.transport.closed and conn.connections == set()
        assert conn.transport.writes_after_close == 0

    run(test)


def test_a_body_over_the_limit_is_a_413_in_the_api_shape() -> None:
    async def test() -> None:
        conn = Connection(StubGateway(), ServerLimits(http=Limits(max_body_bytes=16)))
        conn.feed(post("/v1/messages", b"x" * 17))
        (reply,) = await conn.replies(1)
        await conn.settle()
        assert reply.status == 413 and _anthropic_shape(orjson.loads(reply.body), "request_too_large")
        assert conn.transport.closed and conn.gateway.requests == []

    run(test)


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"POST /v1/messages HTTP/1.1\r\nx-big: " + b"a" * 300, 431),
        (b"POST /v1/messages HTTP/2.0\r\n\r\n", 505),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),  # TLS to a plain-HTTP port
    ],
)
def test_a_head_that_cannot_be_read_gets_a_json_error_and_the_connection_closes(data: bytes, status: int) -> None:
    async def test() -> None:
        conn = Connection(StubGateway(), ServerLimits(http=Limits(max_header_bytes=256)))
        conn.feed(data)
        (reply,) = await conn.replies(1)
        await conn.settle()
        assert reply.status == status and not reply.keep_alive
        assert isinstance(orjson.loads(reply.body)["error"], dict)  # the error key every API shape has
        assert conn.transport.closed and conn.gateway.requests == []

    run(test)


def test_a_broken_second_request_closes_after_the_first_is_answered() -> None:
    async def test() -> None:
        conn = Connection(StubGateway(Reply(200, b"first")))
        conn.feed(post() + b"GARBAGE\r\n\r\n")
        first, second = await conn.replies(2)
        assert (first.status, first.body, second.status) == (200, b"first", 400)
        await conn.settle()
        assert conn.transport.closed and len(conn.gateway.requests) == 1

    run(test)


def test_a_handler_crash_is_a_500_in_the_api_shape_and_closes() -> None:
    async def crash(request: Request, state: CallState) -> Reply:
        raise ValueError("a bug")

    async def test() -> None:
        conn = Connection(StubGateway(crash))
        conn.feed(post("/v1/responses") + post("/v1/responses"))
        (reply,) = await conn.replies(1)
        await conn.settle()
        assert reply.status == 500 and not reply.keep_alive
        assert orjson.loads(reply.body)["error"]["type"] == "server_error"
        assert conn.transport.closed and len(conn.gateway.requests) == 1

    run(test)


# --- streams and connection: close -----------------------------------------------------------------------------------


def test_a_streamed_reply_is_chunked_and_ends_with_the_last_chunk() -> None:
    async def test() -> None:
        frames = [b'data: {"a":1}\n\n', b"", b"data: [DONE]\n\n"]
        conn = Connection(StubGateway(Reply(200, b"", "text/event-stream", stream=frames), Reply(200, b"next")))
        conn.feed(post())
        await conn.until(lambda: conn.transport.written.endswith(LAST_CHUNK))
        raw = bytes(conn.transport.written)
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        assert lines[0] == "HTTP/1.1 200 OK"
        assert {"content-type: text/event-stream", "transfer-encoding: chunked", "cache-control: no-cache"} <= set(
            lines
        )
        assert not any(line.startswith(("content-length", "connection")) for line in lines)
        # an empty frame writes nothing: a zero-size chunk there would end the body early
        assert body == b'f\r\ndata: {"a":1}\n\n\r\ne\r\ndata: [DONE]\n\n\r\n0\r\n\r\n'
        (reply,) = parse(raw)
        assert reply.body == b"".join(frames) and reply.keep_alive
        conn.feed(post())  # the connection goes on after a stream
        assert [r.body for r in await conn.replies(2)][1] == b"next"

    run(test)


def test_connection_close_is_honoured_and_later_pipelined_requests_are_not_served() -> None:
    async def test() -> None:
        conn = Connection(StubGateway(Reply(200, b"only")))
        conn.feed(post("/v1/chat/completions", b"a", "connection: close") + post(body=b"b"))
        (reply,) = await conn.replies(1)
        await conn.settle()
        assert reply.body == b"only" and reply.headers["connection"] == "close" and not reply.keep_alive
        assert conn.transport.closed and [r.body for r in conn.gateway.requests] == [b"a"]

    run(test)


def test_a_streamed_reply_to_connection_close_says_so_and_closes() -> None:
    async def test() -> None:
        conn = Connection(StubGateway(Reply(200, b"", "text/event-stream", stream=[b"data: 1\n\n"])))
        conn.feed(post("/v1/messages", b"{}", "Connection: Close"))
        (reply,) = await conn.replies(1)
        await conn.settle()
        assert reply.headers["connection"] == "close" and reply.body == b"data: 1\n\n"
        assert conn.transport.written.endswith(LAST_CHUNK) and conn.transport.closed

    run(test)


def test_http_1_0_closes_unless_it_asks_for_keep_alive() -> None:
    async def test() -> None:
        conn = Connection(StubGateway())
        conn.feed(b"POST /v1/messages HTTP/1.0\r\ncontent-length: 2\r\n\r\n{}")
        await conn.replies(1)
        await conn.settle()
        assert conn.transport.closed
        conn = Connection(StubGateway())
        conn.feed(b"POST /v1/messages HTTP/1.0\r\nconnection: keep-alive\r\ncontent-length: 2\r\n\r\n{}")
        await conn.replies(1)
        await conn.settle()
        assert not conn.transport.closed

    run(test)


def test_expect_100_continue_is_answered_once_before_the_body() -> None:
    async def test() -> None:
        conn = Connection(StubGateway())
        conn.feed(b"POST /v1/messages HTTP/1.1\r\ncontent-length: 4\r\nexpect: 100-continue\r\n\r\n")
        await conn.settle()
        assert bytes(conn.transport.written) == CONTINUE
        conn.feed(b"{}")
        conn.feed(b"{}")
        await conn.until(lambda: len(conn.transport.written) > len(CONTINUE))
        assert conn.transport.written.count(b"100 Continue") == 1
        (reply,) = parse(conn.transport.written[len(CONTINUE) :])
        assert reply.status == 200 and conn.gateway.requests[0].body == b"{}{}"

    run(test)


# --- hang-ups ------------------------------------------------------------------------------------------------------


def test_a_hang_up_while_the_call_waits_on_the_model_cancels_it() -> None:
    async def test() -> None:
        never = asyncio.Event()
        conn = Connection(StubGateway(waits_for(never, upstream=True)))
        conn.feed(post())
        await conn.until(lambda: bool(conn.gateway.states) and conn.gateway.states[0].waiting_upstream)
        assert conn.protocol.eof_received() is True
        await conn.until(lambda: conn.gateway.cancelled == 1)
        await conn.settle()
        assert conn.transport.closed and not conn.transport.written and conn.connections == set()

    run(test)


def test_a_lost_connection_cancels_the_call_whatever_it_waits_on() -> None:
    async def test() -> None:
        never = asyncio.Event()
        conn = Connection(StubGateway(waits_for(never, upstream=False)))
        conn.feed(post())
        await conn.until(lambda: bool(conn.gateway.requests))
        await conn.settle()
        conn.protocol.connection_lost(ConnectionResetError())
        await conn.until(lambda: conn.gateway.cancelled == 1)
        assert not conn.transport.written and conn.connections == set()

    run(test)


def test_a_half_close_while_the_call_is_not_waiting_on_the_model_is_still_answered() -> None:
    async def test() -> None:
        later = asyncio.Event()
        conn = Connection(StubGateway(waits_for(later, Reply(200, b"answered"), upstream=False)))
        conn.feed(post())
        await conn.until(lambda: bool(conn.gateway.requests))
        conn.protocol.eof_received()
        await conn.settle()
        assert not conn.transport.closed and conn.gateway.cancelled == 0
        later.set()
        (reply,) = await conn.replies(1)
        await conn.settle()
        assert reply.body == b"answered" and conn.transport.closed

    run(test)


def test_an_eof_between_requests_closes_and_an_eof_mid_request_is_a_400() -> None:
    async def test() -> None:
        conn = Connection(StubGateway())
        conn.feed(post())
        await conn.replies(1)
        conn.protocol.eof_received()
        await conn.settle()
        assert conn.transport.closed and len(parse(conn.transport.written)) == 1
        conn = Connection(StubGateway())
        conn.feed(post("/v1/messages")[:-3])
        conn.protocol.eof_received()
        (reply,) = await conn.replies(1)
        assert reply.status == 400 and _anthropic_shape(orjson.loads(reply.body), "invalid_request_error")
        await conn.settle()
        assert conn.transport.closed and conn.gateway.requests == []

    run(test)


# --- timers --------------------------------------------------------------------------------------------------------

FAST = ServerLimits(idle_timeout=0.05, request_timeout=0.05, auth_timeout=0.05)


def test_a_request_that_does_not_arrive_in_time_gets_a_408_and_the_connection_closes() -> None:
    async def test() -> None:
        conn = Connection(StubGateway(), FAST)
        conn.feed(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        (reply,) = await conn.replies(1)
        await conn.settle()
        assert reply.status == 408 and not reply.keep_alive
        assert _openai_shape(orjson.loads(reply.body), "invalid_request_error")
        assert conn.transport.closed and conn.gateway.requests == []

    run(test)


def test_the_request_timer_covers_the_whole_request_not_each_byte() -> None:
    async def test() -> None:
        conn = Connection(StubGateway(), ServerLimits(request_timeout=0.2))
        loop = asyncio.get_running_loop()
        started = loop.time()
        for byte in post():  # a byte every 10 ms: never idle for long, yet too slow for the whole request
            if conn.transport.closed:
                break
            conn.feed(bytes([byte]))
            await asyncio.sleep(0.01)
        (reply,) = await conn.replies(1)
        assert reply.status == 408 and loop.time() - started < 1.0

    run(test)


def test_an_idle_connection_is_closed_silently() -> None:
    async def test() -> None:
        conn = Connection(StubGateway(), FAST)
        await conn.until(lambda: conn.transport.closed)
        assert not conn.transport.written
        conn = Connection(StubGateway(), FAST)
        conn.feed(post())
        await conn.replies(1)
        await conn.until(lambda: conn.transport.closed)  # idle again after its answer
        assert len(parse(conn.transport.written)) == 1

    run(test)


def test_no_timer_fires_while_the_handler_works() -> None:
    async def slow(request: Request, state: CallState) -> Reply:
        await asyncio.sleep(0.2)
        return Reply(200, b"late")

    async def test() -> None:
        conn = Connection(StubGateway(slow, Reply(200, b"again")), FAST)
        conn.feed(post())
        (reply,) = await conn.replies(1)
        assert reply.body == b"late" and not conn.transport.closed
        conn.feed(post())  # kept alive after a long call
        assert [r.body for r in await conn.replies(2)] == [b"late", b"again"]

    run(test)
