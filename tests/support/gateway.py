"""A real gateway (server + capture) on an ephemeral port, run in a background event-loop thread for tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polar_cli.capture import CaptureWriter
from polar_cli.gateway.continuation import TokenIn
from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.server import GatewayServer, ServerLimits
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.gateway.upstream_client import UpstreamClient
from polar_cli.runtime.base import GATEWAY_SOCKET_NAME
from polar_cli.templates import TemplateTraits
from polar_cli.translate.dialects import DialectName, dialect
from polar_cli.translate.upstream import UpstreamOptions
from tests.support.recorder import Recorder


@dataclass
class RunningGateway:
    url: str
    port: int
    capture_dir: Path
    sessions: SessionRegistry
    writer: CaptureWriter
    loop: asyncio.AbstractEventLoop
    # the directory of its Unix socket (`runtime.base.GATEWAY_SOCKET_NAME`), when asked to listen on one
    socket_dir: Path | None = None

    def open_session(self, session_id: str) -> str:
        """Register a session (thread-safely, on the gateway's loop) and return its key."""
        return asyncio.run_coroutine_threadsafe(self._open(session_id), self.loop).result(5)

    async def _open(self, session_id: str) -> str:
        return self.sessions.open(session_id)

    def flush(self) -> None:
        self.writer.flush()


@contextmanager
def running_gateway(
    upstream_url: str,
    capture_dir: Path,
    *,
    dialect_name: DialectName = "sglang",
    model: str = "default",
    allow_unknown_keys: bool = False,
    limits: ServerLimits | None = None,
    upstream_timeout: float = 30.0,
    token_in: TokenIn | None = None,
    traits: TemplateTraits | None = None,
    record: Recorder | None = None,
    socket_dir: Path | None = None,
    **options: Any,
) -> Iterator[RunningGateway]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    sessions = SessionRegistry(allow_unknown=allow_unknown_keys)
    writer = CaptureWriter(capture_dir)
    gateway = Gateway(
        upstream=UpstreamClient(upstream_url, timeout=upstream_timeout),
        options=UpstreamOptions(dialect(dialect_name), model=model, **options),
        sessions=sessions,
        capture=writer,
        token_in=token_in,
        traits=traits,
    )
    if record is not None:
        record.attach(gateway)
    server = GatewayServer(gateway, limits or ServerLimits())
    host, port = asyncio.run_coroutine_threadsafe(server.start("127.0.0.1", 0), loop).result(10)
    if socket_dir is not None:
        socket_dir.mkdir(parents=True, exist_ok=True)
        unix = server.start_unix(socket_dir / GATEWAY_SOCKET_NAME)
        asyncio.run_coroutine_threadsafe(unix, loop).result(10)
    try:
        yield RunningGateway(f"http://{host}:{port}", port, capture_dir, sessions, writer, loop, socket_dir)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        writer.close()
