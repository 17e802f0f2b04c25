"""`polar generate`'s metrics and live report: a listener of finished sessions and a collector of its stage counts.

`attach_hooks` is the run's one hook (`generate.run`): it starts the metrics port when the recipe has
``metrics.port`` and the report refresher the command hands it (``--report-every``: `report.live.Refresher`, made by
`commands.generate`, which stands above both), and returns what the run calls per finished session and at its end.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from polar_cli.metrics import REGISTRY, start

log = logging.getLogger("polar.metrics")

FINISHED = Counter(
    "polar_sessions_finished", "Sessions finished, by verdict (accepted, rejected, error).", ["verdict"],
    registry=REGISTRY,
)  # fmt: skip
REJECTS = Counter(
    "polar_rejects", "Rejected or failed sessions by the code of their reason (docs/design.md).", ["reason"],
    registry=REGISTRY,
)  # fmt: skip


class StageCollector(Collector):
    """Sessions in each stage and waiting for one, read on scrape from the run's progress (a snapshot it replaces
    whole, so reading it from the metrics thread is safe)."""

    def __init__(self, progress: Any) -> None:
        self.progress = progress

    def collect(self) -> Iterator[GaugeMetricFamily]:
        p = self.progress
        snap = p.snapshot
        stages = GaugeMetricFamily("polar_sessions", "Sessions in each stage now.", labels=["stage"])
        in_flight = snap.init + snap.ready + snap.running + snap.postrun
        for stage in ("init", "ready", "running", "postrun"):
            stages.add_metric([stage], getattr(snap, stage))
        yield stages
        queue = GaugeMetricFamily("polar_queue_depth", "Sessions waiting for a stage slot.", labels=["queue"])
        waiting = p.total - p.already - p.done_now - p.errors - in_flight
        queue.add_metric(["sessions"], max(0, waiting))
        queue.add_metric(["ready"], snap.ready)  # prepared containers waiting for a RUN slot
        yield queue


def session_finished(kind: str, row: dict[str, Any]) -> None:
    FINISHED.labels(kind).inc()
    if kind != "accepted":
        REJECTS.labels(str(row.get("reason") or row.get("status") or "").split(":")[0]).inc()


class Hooks:
    """What a run calls: `on_result` per finished session, `close` once the summary is written."""

    def __init__(self, recipe: Any, progress: Any, refresher: Any = None) -> None:
        self.server: Any = None
        self.collector: StageCollector | None = None
        self.refresher = refresher
        if recipe.metrics.port is not None:
            self.collector = StageCollector(progress)
            REGISTRY.register(self.collector)
            self.server, port = start(recipe.metrics.port, recipe.metrics.host)
            log.info("metrics of this run on http://%s:%d/metrics", recipe.metrics.host, port)
        if refresher is not None:
            refresher.start()

    def on_result(self, kind: str, row: dict[str, Any]) -> None:
        session_finished(kind, row)
        if self.refresher is not None:
            self.refresher(kind, row)

    def close(self) -> None:
        if self.refresher is not None:
            self.refresher.close()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        if self.collector is not None:
            REGISTRY.unregister(self.collector)


def attach_hooks(recipe: Any, progress: Any, refresher: Any = None) -> Hooks:
    return Hooks(recipe, progress, refresher)
