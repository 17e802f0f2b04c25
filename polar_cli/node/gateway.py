"""The gateway proxy inside the node: same event loop as the stage pools, one session key per harness session.

The node opens a session before its harness starts (the key goes into the harness's config as its API key) and
closes it after the run. Scripted engines answer per session (gold applies that instance's patch): the node binds
the session's task to its id, and the gateway names the session in every upstream call it makes for it. Real
engines never see it.

Gateway-only sandboxes (`runtime.base.GATEWAY_ONLY`) reach it through a Unix socket as well: `listen_unix` (once,
on first need) opens `GATEWAY_SOCKET_NAME` in a fresh private directory, the one directory their containers mount.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from polar_cli.capture import CaptureRecord, CaptureWriter, read_session_views
from polar_cli.capture.store import next_seq, session_file
from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.pause import ModelCallGate
from polar_cli.gateway.server import GatewayServer
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.inference.engines import EngineHandle
from polar_cli.inference.gold import Task
from polar_cli.runtime.base import GATEWAY_SOCKET_NAME, socket_parent

log = logging.getLogger("polar.node")


class NodeGateway:
    """The proxy, its session registry and its capture writer, for one node."""

    def __init__(self, engine: EngineHandle, capture_dir: Path, *, host: str = "127.0.0.1", url: str | None = None):
        self.engine = engine
        self.host = host
        self._public_url = url
        self.sessions = SessionRegistry(first_seq=lambda sid: next_seq(session_file(capture_dir, sid)))
        self.capture = CaptureWriter(capture_dir)
        self.gateway = gateway = Gateway(
            upstream=engine.upstream,
            options=engine.options,
            sessions=self.sessions,
            capture=self.capture,
            token_in=engine.token_in,
            traits=engine.traits,
        )
        self.server = GatewayServer(gateway)
        self.url = ""
        # the directory of the Unix socket, once `listen_unix` opened it
        self.socket_dir: Path | None = None
        self._unix_lock = asyncio.Lock()

    async def start(self, port: int = 0) -> str:
        """Listen; returns the URL harnesses reach the gateway at."""
        _host, bound = await self.server.start(self.host, port)
        self.url = self._public_url or f"http://{self.host}:{bound}"
        log.info("gateway on %s:%d (harnesses use %s), model %s", self.host, bound, self.url, self.engine.model)
        return self.url

    async def listen_unix(self) -> Path:
        """Also listen on a Unix socket (first call only); returns its directory, which holds nothing else."""
        async with self._unix_lock:
            if self.socket_dir is None:
                directory = Path(tempfile.mkdtemp(prefix="polar-gateway-", dir=socket_parent()))
                # the sandboxes' users (any uid) must traverse it; only the socket is in it
                os.chmod(directory, 0o755)
                await self.server.start_unix(directory / GATEWAY_SOCKET_NAME)
                self.socket_dir = directory
                log.info("gateway also on %s", directory / GATEWAY_SOCKET_NAME)
            return self.socket_dir

    @property
    def gate(self) -> ModelCallGate:
        """The gate that holds model calls back during a weight sync (`gateway.pause`)."""
        return self.gateway.gate

    def open_session(
        self,
        session_id: str,
        task: Task | None,
        *,
        sampling: Mapping[str, Any] | None = None,
        token_in: bool = True,
        token_budget: int | None = None,
    ) -> str:
        """Register a session; returns the key its harness sends as its API key. Call on the event loop.

        ``sampling`` replaces the harness's sampling fields in the session's upstream calls (`gateway.sessions`);
        ``token_in`` False has a token-in gateway render this session's calls (a rollout task that turned it off);
        ``token_budget`` bounds the tokens sampled over all its calls (`gateway.budget`).
        """
        key = self.sessions.open(session_id, sampling=sampling, token_in=token_in, token_budget=token_budget)
        if self.engine.scripted is not None and task is not None:
            self.engine.scripted.bind(session_id, task)
        return key

    def close_session(self, key: str) -> None:
        session = self.sessions.close(key)
        if session is None:
            return
        self.capture.forget(session.id)
        if self.engine.scripted is not None:
            self.engine.scripted.unbind(session.id)
        if self.engine.pool is not None:
            self.engine.pool.forget(session.id)  # engine.urls: its worker no longer counts it

    def flush(self) -> None:
        """Block until every capture record so far is on disk (call from a worker thread)."""
        self.capture.flush()

    def records(self, session_id: str) -> list[CaptureRecord]:
        """A closed session's capture records, read back exactly (call from a worker thread)."""
        self.capture.flush(session_id)
        path = session_file(self.capture.capture_dir, session_id)
        return read_session_views(path) if path.exists() else []

    async def stop(self) -> None:
        """Stop listening and close the upstream connections; capture records are flushed and the writer closed."""
        try:
            await self.server.stop()
        finally:
            self.capture.close()
            if self.socket_dir is not None:
                shutil.rmtree(self.socket_dir, ignore_errors=True)
