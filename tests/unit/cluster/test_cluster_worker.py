"""A gateway node as a node actor runs it (`cluster.worker.NodeWorker`), without Ray: sessions handed in one call each
run through the node's own pools and come back as results; a cancelled one ends through POSTRUN, a queued one at
once. Simulated sessions (`serve.simulated`); Ray itself is the integration tier's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from polar_cli.cluster.worker import JobFeed, NodeSpec, NodeWorker, capacity
from polar_cli.generate.summary import _cause
from polar_cli.node.pools import Job, PoolLimits
from polar_cli.serve.config import parse_serve_config
from polar_cli.serve.models import TaskRequest
from polar_cli.serve.simulated import Simulation
from polar_cli.serve.stages import SessionJob
from polar_cli.serve.tasks import Manifests, resolve

LIMITS = PoolLimits(init=1, run=2, postrun=1, ready=1)


def job(i: int) -> SessionJob:
    config = parse_serve_config({"harnesses": ["pi"], "engine": {"kind": "gold", "tokenizer": "qwen3"}})
    request = TaskRequest.model_validate(
        {"task_id": "t", "instruction": "x", "runtime": {"image": "i"}, "harness": "pi"}
    )
    return SessionJob(resolve(request, config, config.adapters(), Manifests()), i)


def test_capacity_is_what_keeps_run_busy() -> None:
    assert capacity(LIMITS) == 2 + 1 + 1


def test_the_feed_is_fifo_and_drops_by_key() -> None:
    feed = JobFeed()
    for key in "abc":
        feed.push(Job(key, None, 1.0))
    assert feed.drop({"b", "z"}) == ["b"]
    assert [j.key for j in feed] == ["a", "c"]
    feed.push(Job("d", None, 1.0))  # an exhausted feed yields again
    assert next(feed).key == "d"


def test_sessions_handed_in_come_back_with_their_results_and_cancel_ends_them(tmp_path: Path) -> None:
    async def main() -> tuple[list[Any], Any, dict[str, Any]]:
        worker = NodeWorker(
            NodeSpec("simulated", Simulation(init=0.01, run=0.3, postrun=0.01), str(tmp_path), LIMITS), "n1"
        )
        info = await worker.start()
        assert info["capacity"] == 4 and info["node_id"] == "n1"
        runs = [asyncio.ensure_future(worker.run(f"t#{i}", job(i), 30.0)) for i in range(5)]
        await asyncio.sleep(0.1)
        worker.cancel(["t#0", "t#4"], "task cancelled")  # t#0 is running, t#4 still queued
        done = await asyncio.gather(*runs, return_exceptions=True)
        worker.set_weight_version("v9")
        status = worker.gate_status()
        await worker.stop()
        return done, status, worker.info()

    done, status, info = asyncio.run(main())
    assert done[0].status == "cancelled"  # ended through POSTRUN
    assert isinstance(done[4], asyncio.CancelledError)  # never started
    assert [d.status for d in done[1:4]] == ["completed"] * 3
    assert status["weight_version"] == "v9" and info["done"] == 4


@pytest.mark.parametrize(
    ("reason", "cause"),
    [
        ("run_error: node_lost: gateway node node-1 died under the session (ActorDiedError)", "node_lost"),
        ("upstream_error: call 2: 503", "upstream_error"),
        ("run_error: docker went away", "run_error"),
    ],
)
def test_the_summary_counts_retries_by_the_cause_their_reason_names(reason: str, cause: str) -> None:
    assert _cause({"reason": reason}) == cause


def test_a_postrun_that_raises_on_a_node_comes_back_as_an_error(tmp_path: Path, monkeypatch: Any) -> None:
    """Rule 5 of `node.pools` on a node too: the driver gets an error output for the session, never a future it
    waits on for good (issue 23 #2)."""
    from polar_cli.serve.simulated import SimulatedStages

    async def broken(*args: Any) -> Any:
        raise OSError("collecting the patch failed")

    monkeypatch.setattr(SimulatedStages, "postrun", broken)

    async def main() -> Any:
        worker = NodeWorker(NodeSpec("simulated", Simulation(init=0.01, run=0.01), str(tmp_path), LIMITS), "n1")
        await worker.start()
        try:
            return await asyncio.wait_for(worker.run("t#0", job(0), 30.0), 10.0)
        finally:
            await worker.stop()

    output = asyncio.run(main())
    assert output.status == "error" and "collecting the patch failed" in output.reason
