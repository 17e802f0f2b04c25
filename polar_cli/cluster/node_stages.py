"""A generate run's stage functions on a cluster node: the driver's plans name no bundle container and no image this
machine may have, so INIT first makes them ready here (built, pulled or found, once each), then runs as on one box."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from typing import Any

from polar_cli.generate.stages import GenerateStages, PooledSession, SessionPlan
from polar_cli.node.pools import Job
from polar_cli.node.session_steps import in_thread

log = logging.getLogger("polar.cluster")


class NodeGenerateStages(GenerateStages):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._bundles: dict[str, str | None] = {}
        self._images: set[str] = set()
        self._ready_lock = asyncio.Lock()

    async def init(self, job: Job[SessionPlan], deadline: float) -> PooledSession:
        plan = job.payload
        bundle = await self._bundle(plan)
        await self._image(plan)
        return await super().init(Job(job.key, replace(plan, bundle=bundle), job.timeout), deadline)

    async def _bundle(self, plan: SessionPlan) -> str | None:
        from polar_cli.harness.session import mount_bundle

        async with self._ready_lock:
            name = plan.harness.name
            if name not in self._bundles:
                build = self.recipe.runtime.build_images
                self._bundles[name] = await in_thread(
                    self.executor, lambda: mount_bundle(self.runtime, plan.harness, build=build, log=log.info)
                )
            return self._bundles[name]

    async def _image(self, plan: SessionPlan) -> None:
        from polar_cli.swe.images import build_instance_images, ensure_image

        async with self._ready_lock:
            if plan.image in self._images:
                return
            source = self.recipe.manifest.source
            buildable = self.recipe.runtime.build_images and plan.instance.build is not None

            def ready() -> None:
                if buildable and not self.runtime.image_exists(plan.image):
                    build_instance_images(source, self.runtime, log=log.info)
                ensure_image(self.runtime, plan.image)

            await in_thread(self.executor, ready)
            self._images.add(plan.image)
