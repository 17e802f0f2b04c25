"""A `polar proxy`-like server for attacks: the real `GatewayServer` and `Gateway` over an in-process upstream that
answers every call with a canned SGLang answer. Run as a module it serves on loopback in its own process, under a
descriptor limit, and prints its port (``python -m tests.unit.gateway.hostile_server --nofile 128``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import resource
import socket
import sys
import time

import orjson

from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.server import GatewayServer, ServerLimits
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.translate.upstream import UpstreamOptions
from polar_cli.wire.http11 import Response
from tests.unit.gateway.test_handler import ANSWER

KEY = "sk-hostile"
CALL = orjson.dumps({"model": "claude", "max_tokens": 10, "messages": [{"role": "user", "content": "go"}]})


class CannedUpstream:
    async def post_json(self, path: str, body: bytes, *, session: str | None = None) -> Response:
        return Response(200, "OK", {}, orjson.dumps(ANSWER), True)

    async def close(self) -> None:
        pass


def gateway_server(limits: ServerLimits) -> GatewayServer:
    sessions = SessionRegistry()
    sessions.open("s", KEY)
    gateway = Gateway(upstream=CannedUpstream(), options=UpstreamOptions(model="m"), sessions=sessions, capture=None)  # type: ignore[arg-type]
    return GatewayServer(gateway, limits)


def call_bytes(key: str = KEY, body: bytes = CALL, *, close: bool = True) -> bytes:
    """A model call; with ``close`` the server closes the connection after its answer (a half-close would cancel
    the call: a harness that hangs up is gone)."""
    extra = "connection: close\r\n" if close else ""
    head = f"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: {key}\r\n{extra}content-length: {len(body)}\r\n\r\n"
    return head.encode() + body


def exchange(port: int, data: bytes, *, timeout: float = 5.0, source: str = "127.0.0.1") -> bytes:
    """Send ``data`` on a fresh connection and read until the server closes or ``timeout`` passes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0)) as sock:
        sock.sendall(data)
        got = b""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536)
            except (TimeoutError, ConnectionResetError):
                break
            if not chunk:
                break
            got += chunk
        return got


def serves(port: int, source: str = "127.0.0.1") -> bool:
    """Whether a model call on a fresh connection is answered 200."""
    try:
        return exchange(port, call_bytes(), source=source).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


async def _main(args: argparse.Namespace) -> None:
    limits = ServerLimits(
        auth_timeout=args.auth_timeout,
        request_timeout=args.request_timeout,
        max_connections=args.max_connections,
        max_connections_per_peer=args.max_per_peer,
    )
    server = gateway_server(limits)
    _, port = await server.start("127.0.0.1", 0)
    print(port, flush=True)
    await asyncio.sleep(args.seconds)
    await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nofile", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--auth-timeout", type=float, default=20.0)
    parser.add_argument("--request-timeout", type=float, default=60.0)
    parser.add_argument("--max-connections", type=int, default=None)
    parser.add_argument("--max-per-peer", type=int, default=None)
    args = parser.parse_args()
    if args.nofile:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (args.nofile, hard))
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
