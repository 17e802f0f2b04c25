"""`polar generate` on a Ray cluster: the driver (this process) owns the plan, the queue and the run directory; one
gateway node per machine runs the sessions (`worker.NodeWorker` in a node actor) and sends back each session's row.

Rows are written by the driver with the run directory's crash-safety rules (`generate.state`), so a resumed run,
`kill -9` of the driver included, works exactly as on one box: the rerun skips the finished keys and new node actors
sweep what the dead ones left. A row names the node that ran it (``node_id``) and where its capture records are
(``capture_path``, on that node's disk), or carries them into the run directory's capture/ with
``output.collect_capture``. A node lost under a session writes an error row (``run_error: node_lost: ...``) and the
session runs again on another node in the same run, at most ``runtime.outage_retries + 1`` times per key; the
summary counts sessions per node (``by_node``) and the cluster's retries per cause (``cluster.retries``).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections import Counter
from pathlib import Path
from typing import Any

from polar_cli.capture.store import session_file
from polar_cli.cluster.fleet import ClusterError, Fleet
from polar_cli.cluster.remote import RemoteStages, driver_limits, driver_timeout
from polar_cli.cluster.worker import NodeSpec
from polar_cli.config import Recipe
from polar_cli.errors import DiskFull
from polar_cli.generate.rows import SessionFacts, build_row
from polar_cli.generate.stages import SessionPlan
from polar_cli.generate.state import Verdict
from polar_cli.node.pools import Job, PoolLimits, RunEnd, StagePools, Timings

log = logging.getLogger("polar.cluster")


def node_dirs(recipe: Recipe, out: Path) -> str:
    return recipe.cluster.nodes.node_dir or str(out.resolve() / "nodes")


class ClusterRows:
    """The rows side of a cluster run: each node's row recorded, a lost node's session run again."""

    def __init__(self, recipe: Recipe, out: Path, generation: Any) -> None:
        self.recipe = recipe
        self.out = out
        self.generation = generation
        self.pools: StagePools[SessionPlan, None, RunEnd] | None = None
        self.tries: Counter[str] = Counter()
        self.model = ""

    def on_result(self, job: Job[SessionPlan], end: RunEnd, timings: Timings) -> None:
        if end.reason == "ok":
            kind, row = end.value
            self._collect(row)
        else:
            kind, row = self._error_row(job.payload, end, timings)
        self.generation.state.record(Verdict(kind, row))
        self.generation.progress.session_done(kind, row)
        lost = "node_lost" in (end.error or "")
        if lost and self.pools is not None and self.tries[job.key] <= self.recipe.runtime.outage_retries:
            self.tries[job.key] += 1
            log.info("session %s: its node was lost; it runs again on another", job.key)
            self.pools.requeue(job)

    def _collect(self, row: dict[str, Any]) -> None:
        """``output.collect_capture``: the capture file the node shipped, into the run directory's capture/."""
        data = row.pop("_capture_bytes", None)
        if data is None or not row.get("session_id"):
            return
        path = session_file(self.out / "capture", row["session_id"])
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
        row["capture_path"] = str(path.relative_to(self.out))

    def _error_row(self, plan: SessionPlan, end: RunEnd, timings: Timings) -> tuple[str, dict[str, Any]]:
        facts = SessionFacts(
            key=plan.key,
            session_id="",
            instance=plan.instance,
            harness=plan.harness.name,
            attempt=plan.attempt,
            model=self.model,
            end=end,
        )
        timing = timings.to_dict()
        timing["total"] = round(sum(timing.values()), 3)
        kind, row = build_row(facts, timing)
        row["node_id"] = None
        return kind, row


async def run_on_cluster(
    recipe: Recipe, out: Path, plans: list[SessionPlan], generation: Any, engine_info: dict[str, Any]
) -> None:
    """The cluster's version of `generate.run.run_pools`: nodes up, sessions through them, nodes down."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    loop.add_signal_handler(signal.SIGTERM, task.cancel)
    c = recipe.concurrency
    limits = PoolLimits(init=c.init, run=c.run, postrun=c.postrun, ready=c.ready)
    base = node_dirs(recipe, out)
    spec = lambda name: NodeSpec("generate", recipe, f"{base}/{name}", limits, recipe.output.collect_capture)  # noqa: E731
    fleet = Fleet(recipe.cluster, spec)
    rows = ClusterRows(recipe, out, generation)
    try:
        await fleet.start()
        models = {m.info.get("model") for m in fleet.live()}
        if len(models) > 1:
            raise ClusterError(f"the gateway nodes serve different models: {sorted(map(str, models))}")
        rows.model = str(models.pop())
        generation.state.check_model(rows.model)
        engine_info.update(kind=recipe.engine.kind, model=rows.model)
        stages = RemoteStages(fleet, lambda job: recipe.timeouts.session)
        pools: StagePools[SessionPlan, None, RunEnd] = StagePools(
            stages, driver_limits(fleet.capacity()), rows.on_result, run_grace=0.0, fatal=(DiskFull,)
        )
        rows.pools = pools

        def resize(capacity: int) -> None:
            pools.limits = driver_limits(capacity)
            pools.kick()

        fleet.on_capacity = resize
        timeout = driver_timeout(recipe.timeouts.session, recipe.timeouts.eval)
        await pools.run(Job(p.key, p, timeout) for p in plans)
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        engine_info["cluster"] = fleet.stats()
        await fleet.stop()
