"""The node's engine and gateway on a background event loop, for callers that run sessions from a plain thread.

`polar run` drives one session from the main thread (so Ctrl-C, and SIGTERM turned into it, lands where the
container is removed); the engine and the gateway serve on their own loop in a daemon thread meanwhile.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from polar_cli.config import EngineConfig
from polar_cli.errors import UpstreamError
from polar_cli.inference.gold import Task
from polar_cli.node.gateway import NodeGateway

START_TIMEOUT = 600.0  # a first tokenizer fetch or a slow server's probe


@dataclass
class LocalGateway:
    """The node's gateway, driven from the main thread."""

    node: NodeGateway
    loop: asyncio.AbstractEventLoop

    @property
    def url(self) -> str:
        return self.node.url

    def open_session(self, session_id: str, task: Task | None) -> str:
        """Open a session on the gateway's loop; returns the key its harness sends as its API key."""

        async def _open() -> str:
            return self.node.open_session(session_id, task)

        return asyncio.run_coroutine_threadsafe(_open(), self.loop).result(30)


@contextmanager
def local_gateway(config: EngineConfig, capture_dir: Path, run_dir: Path) -> Iterator[LocalGateway]:
    """Engine and gateway on a background event loop, listening on 127.0.0.1 and an ephemeral port."""
    from polar_cli.inference.engines import open_engine

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="polar-gateway", daemon=True)
    thread.start()

    async def _start() -> NodeGateway:
        handle = await open_engine(config, run_dir)
        try:
            node = NodeGateway(handle, capture_dir)
            await node.start()
        except BaseException:
            await handle.close()
            raise
        return node

    async def _stop(node: NodeGateway) -> None:
        try:
            await node.stop()
        finally:
            await node.engine.close()

    def _shutdown(node: NodeGateway | None) -> None:
        # calls still in flight end first, while the capture writer can still record how they ended
        asyncio.run_coroutine_threadsafe(_cancel_pending(), loop).result(30)
        if node is not None:
            asyncio.run_coroutine_threadsafe(_stop(node), loop).result(60)
            asyncio.run_coroutine_threadsafe(_cancel_pending(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)

    try:
        node = asyncio.run_coroutine_threadsafe(_start(), loop).result(START_TIMEOUT)
    except BaseException as exc:
        _shutdown(None)
        if isinstance(exc, TimeoutError):
            raise UpstreamError(f"the engine was not ready within {START_TIMEOUT:g} s") from exc
        raise
    try:
        yield LocalGateway(node, loop)
    finally:
        _shutdown(node)


async def _cancel_pending() -> None:
    # tasks still running when the session ends early (Ctrl-C) must not die with the loop unfinished
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
