"""The gateway's HTTP/1.1 server on raw asyncio: the protocol only moves bytes, the `Gateway` does the work.

One request is in flight per connection; pipelined requests wait in the parser's buffer (reading pauses once more
than `PIPELINE_BUFFER` bytes wait). Reading goes on while a request is served so that a hang-up is seen: a client that
closes while its call waits on the model is gone, and the call is cancelled (the handler then frees the server's slot
with SGLang's abort). A call that is not waiting on the model is still answered after an EOF (half-close).

Timers, all per connection:
- ``auth_timeout``: a new connection must deliver its first whole request within this long, and stays on this short
  idle timer until one of its requests succeeds (2xx); a 401 closes it. Idle connections that never proved a key
  hold no descriptor for long.
- ``idle_timeout``: a kept-alive connection with no request in progress is closed after this long.
- ``request_timeout``: once the first byte of a request arrived, the whole request must arrive within this long
  (slow-loris clients get a 408 and the connection closes).
Caps (`admission.Admission`): connections per process and per peer address; one over a cap is answered 503 and
closed at once. Refusals and asyncio's accept errors (EMFILE) are logged at most once a minute.
`GatewayServer.start_unix` adds a Unix socket listener serving the same way (gateway-only sandboxes reach it through
the relay, `runtime.base.GATEWAY_ONLY`).

A peer that breaks HTTP gets a 4xx in the API shape its path suggests, then the connection closes. A crash inside the
handler is a 500 in that shape, the connection closes, and the server keeps serving others.

The server serves any `Handler`: the gateway (`handler.Gateway`), or the rollout service's API (`serve.api`). A reply
may be ``live``: an async stream of chunks (server-sent events) written as they come, until it ends or the peer
hangs up (which cancels it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from polar_cli.errors import PeerProtocolError
from polar_cli.gateway.admission import Admission, Verdict, default_max_connections, quiet_accept_errors
from polar_cli.gateway.handler import CallState, Reply
from polar_cli.wire.http11 import (
    CONTINUE,
    LAST_CHUNK,
    NEED_DATA,
    Limits,
    Request,
    RequestParser,
    encode_chunk,
    encode_head,
    encode_response,
)

log = logging.getLogger("polar.server")

# bytes of pipelined requests a connection may send ahead of the one being served before reading pauses
PIPELINE_BUFFER = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServerLimits:
    """What a peer may hold: sizes and counts of one message (``http``), time, and connections."""

    http: Limits = field(default_factory=Limits)
    # seconds a kept-alive connection that has had a 2xx answer may sit idle
    idle_timeout: float = 300.0
    # seconds a request may take to arrive once its first byte did (slow-loris -> 408)
    request_timeout: float = 60.0
    # seconds a connection may sit idle before its first 2xx answer (first request, failed auth)
    auth_timeout: float = 20.0
    # open connections per process; None: half of RLIMIT_NOFILE after a reserve (`admission.default_max_connections`)
    max_connections: int | None = None
    # open connections per peer address (TCP); None: three quarters of max_connections, so one peer never takes all
    max_connections_per_peer: int | None = None

    def admission(self) -> Admission:
        total = self.max_connections if self.max_connections is not None else default_max_connections()
        per_peer = self.max_connections_per_peer
        return Admission(total, per_peer if per_peer is not None else max(1, total * 3 // 4))


class Handler(Protocol):
    """What the server serves: one request in, one reply out."""

    async def handle(self, request: Request, state: CallState) -> Reply: ...

    def error_body(self, path: str, status: int, kind: str, message: str) -> bytes:
        """An error in the shape the caller of ``path`` reads."""
        ...

    async def close(self) -> None: ...


class GatewayProtocol(asyncio.Protocol):
    def __init__(
        self,
        gateway: Handler,
        limits: ServerLimits,
        connections: set[GatewayProtocol],
        admission: Admission | None = None,
    ) -> None:
        self._gateway = gateway
        self._limits = limits
        self._connections = connections
        self._admission = admission if admission is not None else limits.admission()
        self._verdict: Verdict | None = None
        self._trusted = False  # one of its requests got a 2xx: the idle timer is idle_timeout, not auth_timeout
        self._parser = RequestParser(limits.http)
        self._transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._reading_request = False
        self._sent_continue = False
        self._call = CallState()

    # -- asyncio callbacks ---------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._verdict = self._admission.admit(transport.get_extra_info("peername"))
        if not self._verdict.admitted:
            body = self._gateway.error_body("", 503, "overloaded", f"too many connections: {self._verdict.reason}")
            transport.write(encode_response(503, body, keep_alive=False))
            transport.close()
            return
        self._transport = transport
        self._connections.add(self)
        self._arm(self._limits.auth_timeout)

    def data_received(self, data: bytes) -> None:
        self._parser.receive_data(data)
        if self._task is not None:
            if self._parser.buffered > PIPELINE_BUFFER and self._transport is not None:
                self._transport.pause_reading()
            return
        if not self._reading_request:
            self._reading_request = True
            self._arm(self._limits.request_timeout)
        self._pump()

    def eof_received(self) -> bool:
        self._parser.receive_data(b"")
        if self._task is not None:
            if self._call.waiting_upstream:
                self._task.cancel()
            return True
        self._pump()
        return True  # keep the transport open until our answer is written

    def connection_lost(self, exc: Exception | None) -> None:
        if self._verdict is not None:
            self._admission.release(self._verdict)
            self._verdict = None
        self._connections.discard(self)
        self._disarm()
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._transport = None

    # -- request loop -------------------------------------------------------------------------------------------

    def _pump(self) -> None:
        if self._task is not None or self._transport is None:
            return
        try:
            event = self._parser.next_event()
        except PeerProtocolError as exc:
            self._fail(exc)
            return
        if event is NEED_DATA:
            if self._parser.wants_continue() and not self._sent_continue:
                self._sent_continue = True
                self._transport.write(CONTINUE)
            if self._parser.peer_closed:
                self._close()
            return
        assert isinstance(event, Request)
        self._reading_request = False
        self._sent_continue = False
        self._disarm()
        self._call = CallState()
        self._task = asyncio.get_running_loop().create_task(self._serve(event))

    async def _serve(self, request: Request) -> None:
        try:
            reply = await self._gateway.handle(request, self._call)
        except asyncio.CancelledError:
            self._task = None
            self._close()
            return
        except Exception:
            log.exception("handler crashed on %s %s", request.method, request.path)
            body = self._gateway.error_body(request.path, 500, "upstream", "internal gateway error")
            reply = Reply(500, body)
            request = Request(request.method, request.target, request.path, request.query, {}, b"", False)
        transport = self._transport
        if transport is None:
            return
        keep_alive = request.keep_alive and reply.status != 401  # a wrong key does not get to keep the connection
        if reply.live is not None:
            try:
                await self._write_live(transport, reply, keep_alive)
            except asyncio.CancelledError:
                self._task = None
                self._close()
                return
            except Exception:  # the answer began: all that is left to do is close the connection
                log.exception("live reply to %s %s failed", request.method, request.path)
                self._task = None
                self._close()
                return
        else:
            self._write(transport, reply, keep_alive)
        self._task = None
        self._trusted = self._trusted or 200 <= reply.status < 300
        if not keep_alive:
            self._close()
            return
        if self._parser.peer_closed:
            self._close()
            return
        transport.resume_reading()
        self._arm(self._limits.idle_timeout if self._trusted else self._limits.auth_timeout)
        if self._parser.buffered:
            self._reading_request = True
            self._arm(self._limits.request_timeout)
        self._pump()

    def _write(self, transport: asyncio.Transport, reply: Reply, keep_alive: bool) -> None:
        if reply.stream is None:
            transport.write(encode_response(reply.status, reply.body, reply.content_type, keep_alive=keep_alive))
            return
        transport.writelines([_stream_head(reply, keep_alive), *map(encode_chunk, reply.stream), LAST_CHUNK])

    async def _write_live(self, transport: asyncio.Transport, reply: Reply, keep_alive: bool) -> None:
        assert reply.live is not None
        transport.write(_stream_head(reply, keep_alive))
        async for chunk in reply.live:
            if self._transport is None:
                return
            transport.write(encode_chunk(chunk))
        transport.write(LAST_CHUNK)

    def _fail(self, exc: PeerProtocolError) -> None:
        if self._transport is None:
            return
        body = self._gateway.error_body(exc.path or "", exc.status, exc.kind, exc.message)
        self._transport.write(encode_response(exc.status, body, keep_alive=False))
        self._close()

    def _close(self) -> None:
        self._disarm()
        if self._transport is not None:
            self._transport.close()

    # -- timers -------------------------------------------------------------------------------------------------

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._on_timeout)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timeout(self) -> None:
        self._timer = None
        if self._task is not None:
            return
        if self._reading_request:
            self._fail(PeerProtocolError("request not received in time", status=408))
        else:
            self._close()


def _stream_head(reply: Reply, keep_alive: bool) -> bytes:
    """The head of a chunked answer (a synthetic stream, or a live one)."""
    headers = [("content-type", reply.content_type), ("cache-control", "no-cache"), ("transfer-encoding", "chunked")]
    if not keep_alive:
        headers.append(("connection", "close"))
    return encode_head(reply.status, headers)


class GatewayServer:
    """The listening sockets (TCP, and a Unix socket for gateway-only sandboxes) and their connections."""

    def __init__(self, gateway: Handler, limits: ServerLimits = ServerLimits()) -> None:
        self.gateway = gateway
        self.limits = limits
        self._server: asyncio.Server | None = None
        self._unix: asyncio.Server | None = None
        self._unix_path: Path | None = None
        self._connections: set[GatewayProtocol] = set()
        self.admission = limits.admission()

    def _protocol(self) -> GatewayProtocol:
        return GatewayProtocol(self.gateway, self.limits, self._connections, self.admission)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        quiet_accept_errors()
        self._server = await loop.create_server(self._protocol, host, port, backlog=1024)
        sockname = self._server.sockets[0].getsockname()
        return str(sockname[0]), int(sockname[1])

    async def start_unix(self, path: Path) -> None:
        """Also listen on a Unix socket at ``path`` (replacing a stale one), connectable by any local user: the
        sandboxes that reach it run as whatever user their image has, and its directory is what guards it."""
        loop = asyncio.get_running_loop()
        path.unlink(missing_ok=True)
        self._unix = await loop.create_unix_server(self._protocol, str(path), backlog=1024)
        self._unix_path = path
        os.chmod(path, 0o666)

    async def stop(self) -> None:
        servers = [s for s in (self._server, self._unix) if s is not None]
        for server in servers:
            server.close()
        if servers:
            for conn in list(self._connections):
                conn._close()
        for server in servers:
            with contextlib.suppress(Exception):
                await server.wait_closed()
        if self._unix_path is not None:
            self._unix_path.unlink(missing_ok=True)
        await self.gateway.close()
