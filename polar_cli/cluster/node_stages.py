"""A generate run's stage functions on a cluster node: the driver's plans name no bundle container and no image this
machine may have, so INIT first makes them ready here (built, pulled or found, once each), then runs as on one box."""

from __future__ import annotations

import logging
from dataclasses import replace

from polar_cli.generate.stages import GenerateStages, PooledSession, SessionPlan
from polar_cli.node.pools import Job
from polar_cli.tasks.images import Images

log = logging.getLogger("polar.cluster")


class NodeGenerateStages(GenerateStages):
    async def init(self, job: Job[SessionPlan], deadline: float) -> PooledSession:
        plan = job.payload
        bundle = await self.bundle(plan.harness)
        images = Images.of_recipe(self.recipe, self.runtime, log.info)
        await self.image(plan.image, lambda: type(plan.kind).ready_images([(plan.instance, plan.kind)], images))
        return await super().init(Job(job.key, replace(plan, bundle=bundle), job.timeout), deadline)
