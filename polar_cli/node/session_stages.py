"""What the stage functions of every kind of run share (`generate.stages`, `serve.stages`): a session opened at the
gateway and prepared in its container, the gateway-only sandbox found once, and a session discarded or concluded
with its egress log.

A session whose preparation fails never leaks: its gateway session and its egress proxy are closed before the error
goes on. The sandbox (the gateway's Unix socket directory and the relay's bundle) is made on first need, once per
node, under a lock: sessions that start together share it. So are, for runs that learn their tasks as they come (the
rollout service, a cluster's nodes), each harness's bundle and each task's image (`bundle`, `image`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from polar_cli.capture import CaptureRecord
from polar_cli.egress.sessions import EgressRows, SessionEgress
from polar_cli.harness.base import HarnessAdapter, Wiring
from polar_cli.harness.session import Collected, HarnessRun, Prepared, SessionSpec
from polar_cli.node.gateway import NodeGateway
from polar_cli.node.session_steps import SessionSteps, in_thread

log = logging.getLogger("polar.node")


class OpenSession(Protocol):
    """A session between INIT and POSTRUN, as each kind of run holds it."""

    session_id: str
    key: str
    prepared: Prepared


class SessionStages:
    def __init__(self, steps: SessionSteps, gateway: NodeGateway, egress: SessionEgress, build_images: bool) -> None:
        """``steps`` run the sessions on its runtime and executor; ``egress`` opens each session's allowlist proxy."""
        self.steps, self.runtime, self.executor = steps, steps.runtime, steps.executor
        self.gateway, self.model = gateway, gateway.engine.model
        self.egress, self.build_images = egress, build_images
        self._sandbox: tuple[str, str] | None = None
        self._sandbox_lock = asyncio.Lock()
        self._bundles: dict[str, str | None] = {}
        self._images: set[str] = set()
        self._ready_lock = asyncio.Lock()

    async def sandbox(self) -> tuple[str, str]:
        """The gateway's socket directory (it listens there from now on) and the relay's bundle (built if missing)."""
        async with self._sandbox_lock:
            if self._sandbox is None:
                socket_dir = await self.gateway.listen_unix()
                relay = await in_thread(
                    self.executor, lambda: self.runtime.relay(build=self.build_images, log=log.info)
                )
                self._sandbox = (str(socket_dir), relay)
            return self._sandbox

    async def bundle(self, adapter: HarnessAdapter) -> str | None:
        """The harness's bundle to mount (None: it installs in the container), made ready on its first session."""
        from polar_cli.harness.session import mount_bundle

        async with self._ready_lock:
            if adapter.name not in self._bundles:
                self._bundles[adapter.name] = await in_thread(
                    self.executor, lambda: mount_bundle(self.runtime, adapter, build=self.build_images, log=log.info)
                )
            return self._bundles[adapter.name]

    async def image(self, image: str, make_ready: Callable[[], object] | None) -> None:
        """``image`` present before its first session: ``make_ready`` (the task kind's `ready_images`, which builds
        what it can) run first when given, then ``image`` pulled if it is still missing; once per image."""
        from polar_cli.swe.images import ensure_image

        async with self._ready_lock:
            if image in self._images:
                return

            def ready() -> None:
                if make_ready is not None:
                    make_ready()
                ensure_image(self.runtime, image)

            await in_thread(self.executor, ready)
            self._images.add(image)

    async def prepare(
        self, session_id: str, key: str, spec: Callable[[], Awaitable[SessionSpec]], wiring: Wiring
    ) -> Prepared:
        """The container prepared from the spec ``spec()`` makes; when anything fails, the gateway session ``key`` and
        the session's egress proxy are closed before the error goes on."""
        try:
            return await self.steps.prepare(await spec(), wiring)
        except BaseException:
            self.gateway.close_session(key)
            await self.egress.close(session_id)
            raise

    async def discard(self, job: object, session: OpenSession) -> None:
        self.gateway.close_session(session.key)
        await self.steps.discard(session.prepared)
        await self.egress.close(session.session_id)

    async def conclude(
        self, session: OpenSession, artifacts: Path | None, run: HarnessRun | None
    ) -> tuple[Collected, list[CaptureRecord], EgressRows | None]:
        """POSTRUN's first half (`SessionSteps.conclude`), then the session's egress log into ``artifacts``."""
        collected, records = await self.steps.conclude(self.gateway, session.key, session.prepared, artifacts, run)
        return collected, records, await self.egress.close(session.session_id, artifacts)
