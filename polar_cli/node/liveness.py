"""Is the engine still answering, and how to bring a launched one back (`node.health` drives both).

The check is ``GET /health`` (SGLang and vLLM both serve it; a server without it is asked ``/v1/models``) on a
client of its own, with a short timeout, so a check never queues behind the sessions' long model calls. A launched
server whose process exited is `Gone` at once. A restart stops what is left of the old process group and launches
the same command on the same port, so the gateway's upstream URL stays valid.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import urlsplit

from polar_cli.config import EngineConfig
from polar_cli.errors import UpstreamError
from polar_cli.gateway.upstream_client import UpstreamClient
from polar_cli.inference.engines import EngineHandle
from polar_cli.inference.launcher import launch_sglang, log_tail
from polar_cli.node.health import Gone


class EngineLiveness:
    """The health check and the restart of one engine (scripted engines have neither: see `watched`)."""

    def __init__(self, handle: EngineHandle, config: EngineConfig, log_path: Path, timeout: float = 30.0) -> None:
        self.handle = handle
        self.config = config
        self.log_path = log_path
        self.url = handle.server.url if handle.server is not None else getattr(handle.upstream, "base_url", "")
        # no kept-alive connection: nothing to close, and a restarted server is reached afresh
        self.client = UpstreamClient(self.url, timeout=timeout, connect_timeout=min(timeout, 5.0), max_idle=0)
        self.restarts_left = config.restarts

    @staticmethod
    def watched(handle: EngineHandle) -> bool:
        """Whether there is a server to watch (an in-process scripted engine cannot go down on its own)."""
        return handle.scripted is None

    async def check(self) -> str | Gone | None:
        server = self.handle.server
        if server is not None and not server.running():
            return Gone(f"the launched server exited with {server.process.returncode}")
        try:
            response = await self.client.get("/health")
            if response.status == 404:
                response = await self.client.get("/v1/models")
        except UpstreamError as exc:
            return exc.message
        return None if response.status == 200 else f"/health answered {response.status}"

    def can_restart(self) -> bool:
        return self.handle.server is not None and self.config.sglang is not None

    async def restart(self) -> None:
        """Stop the old server's process group, launch it again on the same port, wait until it is healthy."""
        if self.restarts_left <= 0:
            raise UpstreamError(f"no restart left (engine.restarts: {self.config.restarts})")
        self.restarts_left -= 1
        old = self.handle.server
        assert old is not None and self.config.sglang is not None
        await asyncio.get_running_loop().run_in_executor(None, old.stop)
        port = urlsplit(old.url).port
        settings = self.config.sglang.model_copy(update={"port": port})
        try:
            self.handle.server = await launch_sglang(settings, self.log_path)
        except UpstreamError as exc:
            first = exc.message.splitlines()[0]
            raise UpstreamError(f"{first}; log {self.log_path}:\n{log_tail(self.log_path, 800)}") from exc
