"""The Ray actor around `worker.NodeWorker`: one per machine, pinned there, never restarted by Ray (a restarted node
would have lost its sessions; the driver runs them again elsewhere instead)."""

from __future__ import annotations

from functools import cache
from typing import Any

from polar_cli.cluster.worker import NodeSpec, NodeWorker
from polar_cli.config.cluster import ClusterConfig


@cache
def node_actor_class() -> Any:
    import ray

    class NodeActor:
        def __init__(self, spec: NodeSpec, name: str) -> None:
            import logging

            logging.getLogger("polar").setLevel(logging.INFO)
            self.worker = NodeWorker(spec, name)

        async def start(self) -> dict[str, Any]:
            return await self.worker.start()

        async def run(self, key: str, payload: Any, timeout: float) -> Any:
            return await self.worker.run(key, payload, timeout)

        async def cancel(self, keys: list[str], reason: str) -> int:
            return self.worker.cancel(keys, reason)

        async def pause(self, mode: str) -> int:
            return await self.worker.pause(mode)

        async def resume(self) -> None:
            self.worker.resume()

        async def set_weight_version(self, version: str | None) -> None:
            self.worker.set_weight_version(version)

        async def engines(self) -> list[dict[str, Any]]:
            return self.worker.engines()

        async def load_weights(self, request: Any, urls: list[str] | None) -> list[dict[str, Any]]:
            return await self.worker.load_weights(request, urls)

        async def retire_engines(self, reasons: dict[str, str]) -> list[dict[str, Any]]:
            return self.worker.retire_engines(reasons)

        async def gate_status(self) -> dict[str, Any] | None:
            return self.worker.gate_status()

        async def info(self) -> dict[str, Any]:
            return self.worker.info()

        async def walls(self) -> dict[str, float]:
            return dict(self.worker.walls)

        async def sweep(self) -> int:
            return self.worker.sweep()

        async def stop(self) -> None:
            await self.worker.stop()

    return ray.remote(num_cpus=0, max_restarts=0, max_task_retries=0)(NodeActor)


def start_actor(ray_node: str, cluster: ClusterConfig, spec: NodeSpec, name: str) -> Any:
    """A node actor on ``ray_node`` (hard affinity), holding one unit of the node resource."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return (
        node_actor_class()
        .options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(ray_node, soft=False),
            resources={cluster.nodes.resource: 1},
            max_concurrency=10000,
        )
        .remote(spec, name)
    )
