"""`polar serve` never leaves a task running after a fault (issue 23 #2) and holds no finished result in memory
(#6): an exception in POSTRUN, in the result handling or in the journal's writes is an error (retried, then masked)
and the task completes; a POSTRUN that hangs is ended as an error; whole results live on disk and are read back."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path
from typing import Any

import pytest

from polar_cli.config import TimeoutsConfig
from polar_cli.node.pools import Job, RunEnd, Timings
from polar_cli.serve import service as service_module
from polar_cli.serve.journal import Journal
from polar_cli.serve.results import SessionOutput
from polar_cli.serve.service import RolloutService
from polar_cli.serve.simulated import SimulatedNode, SimulatedStages, Simulation
from polar_cli.serve.stages import SessionJob
from tests.unit.serve.test_serve_service import LIMITS, config, run, task


class FaultyStages(SimulatedStages):
    """POSTRUN raises for the (task, sample, attempt)s in ``raise_in`` and hangs for those in ``hang_in``."""

    raise_in: set[tuple[str, int, int]] = set()
    hang_in: set[tuple[str, int, int]] = set()

    async def postrun(self, job: Job[SessionJob], session: str | None, end: RunEnd, timings: Timings) -> SessionOutput:
        sj = job.payload
        if (sj.task_id, sj.index, sj.attempt) in self.hang_in:
            await asyncio.sleep(3600)
        if (sj.task_id, sj.index, sj.attempt) in self.raise_in:
            raise ValueError(f"injected in POSTRUN of {sj.key}")
        return await super().postrun(job, session, end, timings)


class FaultyNode(SimulatedNode):
    def stages(self, cancelled: Any) -> SimulatedStages:
        self.last = FaultyStages(self.sim, self.gate, cancelled)
        return self.last


def run_faulty(
    tmp: Path, body: Any, *, raise_in: Any = (), hang_in: Any = (), eval_timeout: float = 60.0, **service: Any
) -> Any:
    FaultyStages.raise_in, FaultyStages.hang_in = set(raise_in), set(hang_in)
    cfg = config(tmp, **service).model_copy(update={"timeouts": TimeoutsConfig(eval=eval_timeout)})

    async def main() -> Any:
        node = FaultyNode(LIMITS, Simulation(init=0.01, run=0.02, postrun=0.01, success=1.0))
        svc = RolloutService(cfg, Journal(tmp / "state"), node)
        await svc.start()
        try:
            return await body(svc)
        finally:
            await svc.stop()

    return asyncio.run(main())


def test_a_postrun_exception_is_retried_then_an_error_and_the_task_completes(tmp_path: Path) -> None:
    async def body(svc: RolloutService) -> dict[str, Any]:
        svc.submit(task("t1", 3))
        return await svc.wait("t1", 30)

    # sample 0 fails once (retried, then fine); sample 1 fails on every attempt (an error, masked)
    raise_in = {("t1", 0, 1), *(("t1", 1, a) for a in range(1, 5))}
    result = run_faulty(tmp_path, body, raise_in=raise_in, session_retries=1)
    assert result["done"] and result["state"] == "completed"
    first, second, third = result["sessions"]
    assert first["status"] == "completed" and first["attempts"] == 2
    assert second["status"] == "error" and second["masked"] and second["attempts"] == 2
    assert "POSTRUN raised ValueError: injected in POSTRUN of t1#1" in second["reason"]
    assert third["status"] == "completed"


def test_a_postrun_that_hangs_ends_as_an_error_within_the_tasks_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service_module, "POSTRUN_SLACK", 0.3)

    async def body(svc: RolloutService) -> dict[str, Any]:
        svc.submit(task("t1", 2))
        return await svc.wait("t1", 30)

    result = run_faulty(tmp_path, body, hang_in={("t1", 1, 1)}, session_retries=0, eval_timeout=0.2)
    assert result["done"] and [s["status"] for s in result["sessions"]] == ["completed", "error"]
    assert "POSTRUN did not finish within 0.5 s" in result["sessions"][1]["reason"]


@pytest.mark.parametrize("fails", ["once", "always"])
def test_the_result_handling_raising_never_leaves_the_task_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    real = service_module.session_result
    calls = [0]

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if (fails == "always" and args[2].status != "error") or calls[0] == 1:
            raise KeyError("injected in the result callback")
        return real(*args, **kwargs)

    monkeypatch.setattr(service_module, "session_result", flaky)

    async def body(svc: RolloutService, node: SimulatedNode) -> dict[str, Any]:
        svc.submit(task("t1", 2))
        return await svc.wait("t1", 30)

    result = run(tmp_path, body, session_retries=0)
    assert result["done"], "the task stayed running"
    statuses = sorted(s["status"] for s in result["sessions"])
    assert "error" in statuses and len(statuses) == 2
    error = next(s for s in result["sessions"] if s["status"] == "error")
    assert "the result callback raised KeyError" in error["reason"] and error["masked"]


def test_a_journal_that_cannot_write_results_still_completes_the_task_from_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def eio(self: Journal, task_id: str, result: dict[str, Any]) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(Journal, "add_result", eio)

    async def body(svc: RolloutService, node: SimulatedNode) -> dict[str, Any]:
        svc.submit(task("t1", 3))
        return await svc.wait("t1", 30)

    result = run(tmp_path, body)
    assert result["done"] and len(result["sessions"]) == 3
    assert all(s["traces"] for s in result["sessions"])


def test_finished_results_are_held_on_disk_not_in_memory_and_read_back_whole(tmp_path: Path) -> None:
    async def body(svc: RolloutService, node: SimulatedNode) -> tuple[dict[str, Any], dict[int, Any]]:
        svc.submit(task("t1", 4))
        await svc.wait("t1", 30)
        held = dict(svc.tasks["t1"].results)
        return svc.result("t1"), held

    result, held = run(tmp_path, body)
    assert all(set(r) == {"index", "status", "reward", "session_id", "masked"} for r in held.values())
    assert [len(s["traces"][0]["response_ids"]) for s in result["sessions"]] == [4, 4, 4, 4]

    async def again(svc: RolloutService, node: SimulatedNode) -> dict[str, Any]:
        listed = svc.result("t1", sessions=False)  # a replayed done task: summaries read on first ask
        assert listed["counts"]["completed"] == 4 and "sessions" not in listed
        return svc.result("t1")

    assert run(tmp_path, again) == result
