"""`polar serve`'s metrics: the service's own status (`RolloutService.status`), read on scrape on its event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from polar_cli.metrics import REGISTRY, start

log = logging.getLogger("polar.metrics")


class ServeCollector(Collector):
    """Each scrape asks the service's loop for ``status()`` (its dicts change only on that loop) and waits 2 s."""

    def __init__(self, loop: asyncio.AbstractEventLoop, status: Callable[[], dict[str, Any]]) -> None:
        self.loop = loop
        self.status = status

    def _status(self) -> dict[str, Any] | None:
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()

        def read() -> None:
            try:
                future.set_result(self.status())
            except Exception as exc:  # reported as a missing scrape, never as a crash of the service
                future.set_exception(exc)

        try:
            self.loop.call_soon_threadsafe(read)
            return future.result(timeout=2)
        except (RuntimeError, concurrent.futures.TimeoutError, Exception):
            return None

    def collect(self) -> Iterator[Any]:
        s = self._status()
        if s is None:
            return
        stages = GaugeMetricFamily("polar_sessions", "Sessions in each stage now.", labels=["stage"])
        for stage in ("init", "ready", "running", "postrun"):
            stages.add_metric([stage], s["pools"].get(stage, 0))
        yield stages
        queue = GaugeMetricFamily("polar_queue_depth", "Sessions waiting for a stage slot.", labels=["queue"])
        queue.add_metric(["sessions"], s["queue"]["depth"])
        queue.add_metric(["ready"], s["pools"].get("ready", 0))
        queue.add_metric(["deliveries"], s["deliveries"]["pending"])
        yield queue
        tasks = GaugeMetricFamily("polar_serve_tasks", "Tasks the service holds, by state.", labels=["state"])
        for state, n in sorted(s["tasks"].items()):
            tasks.add_metric([state], n)
        yield tasks
        by_state = GaugeMetricFamily("polar_serve_sessions", "Sessions of held tasks by state.", labels=["state"])
        for state, n in sorted(s["sessions"].items()):
            by_state.add_metric([state], n)
        yield by_state
        failed = CounterMetricFamily("polar_serve_callbacks_failed", "Callbacks given up, by cause.", labels=["cause"])
        for cause, n in sorted(s["deliveries"]["failed"].items()):
            failed.add_metric([str(cause)], n if isinstance(n, int | float) else 1)
        yield failed
        paused = GaugeMetricFamily("polar_serve_paused", "1 while the model-call gate is closed for a weight sync.")
        paused.add_metric([], 1 if s.get("paused") else 0)
        yield paused
        info = InfoMetricFamily("polar_serve_weights", "The weights' version the service stamps on new calls.")
        info.add_metric([], {"version": str(s.get("weight_version") or "")})
        yield info


class ServeMetrics:
    def __init__(self, service: Any, host: str, port: int) -> None:
        self.collector = ServeCollector(asyncio.get_running_loop(), service.status)
        REGISTRY.register(self.collector)
        self.server, self.port = start(port, host)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        REGISTRY.unregister(self.collector)


def serve_metrics(service: Any, host: str, port: int | None) -> ServeMetrics | None:
    """The service's metrics port (call on its loop, after ``service.start``); None when no port is asked for."""
    return ServeMetrics(service, host, port) if port is not None else None
