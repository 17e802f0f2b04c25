"""An exception in any stage after RUN never drops a generate session (issue 23 #2): it becomes an error row whose
reason names the stage and the exception, and errors are what the next run (or the outage rules) retries. Before,
POSTRUN's exception was logged and the row silently lost for that run."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from polar_cli.config import parse_recipe
from polar_cli.generate.rows import SessionFacts, build_row
from polar_cli.generate.stages import GenerateStages, PooledSession, SessionPlan
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionSpec, prepare
from polar_cli.node.pools import Job, PoolLimits, RunEnd, StagePools, Timings
from polar_cli.node.session_steps import SessionSteps
from tests.support.fake_runtime import FakeRuntime, result, session_responder
from tests.unit.generate.test_generate_rows import INSTANCE, OK_RUN, RECIPE
from tests.unit.generate.test_generate_session_logs import Gateway, failing_evaluation


class Injected(RuntimeError):
    pass


def boom(where: str) -> Any:
    def raiser(*args: Any, **kwargs: Any) -> Any:
        raise Injected(f"injected at {where}")

    return raiser


class OneSession:
    """INIT hands out a prepared session, RUN ends it normally; POSTRUN is generate's own."""

    def __init__(self, stages: GenerateStages, session: PooledSession) -> None:
        self.inner = stages
        self.session = session

    async def init(self, job: Job[SessionPlan], deadline: float) -> PooledSession:
        return self.session

    async def run(self, job: Job[SessionPlan], session: PooledSession, deadline: float) -> Any:
        return OK_RUN

    async def postrun(self, job: Job[SessionPlan], session: Any, end: RunEnd, timings: Timings) -> SessionFacts:
        return await self.inner.postrun(job, session, end, timings)

    async def discard(self, job: Job[SessionPlan], session: Any) -> None:
        return None


# every step after RUN: collecting (container, capture), building trajectories, grading, writing the logs, the row
STEPS = ["conclude", "build", "evaluate", "write_logs", "row", "row_twice"]


@pytest.mark.parametrize("step", STEPS)
def test_an_exception_in_any_step_after_run_is_an_error_row_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    recipe = parse_recipe(RECIPE, [])
    runtime = FakeRuntime(session_responder(result("done")))
    rows: list[tuple[str, dict[str, Any]]] = []
    calls = [0]

    def on_result(job: Job[SessionPlan], facts: SessionFacts, timings: Timings) -> None:
        calls[0] += 1
        if (step == "row" and calls[0] == 1) or step == "row_twice":
            raise Injected("injected at row")
        rows.append(build_row(facts, timings.to_dict()))

    with ThreadPoolExecutor(2) as pool:
        gateway = Gateway(tmp_path / "capture")
        steps = SessionSteps(runtime, pool)
        stages = GenerateStages(recipe, steps, gateway, tmp_path, None)  # type: ignore[arg-type]
        monkeypatch.setattr(stages, "_evaluate", lambda plan, patch, ready: failing_evaluation("org/model"))
        injected = {
            "conclude": (steps, "conclude"),
            "build": (stages, "_build"),
            "evaluate": (stages, "_evaluate"),
            "write_logs": (stages, "_write_logs"),
        }
        if step in injected:
            target, name = injected[step]
            monkeypatch.setattr(target, name, boom(step))
        plan = SessionPlan("org__repo-1::pi::1", INSTANCE, ADAPTERS["pi"], 1, "img", "bundle-pi")
        spec = SessionSpec("sid.pi.1.abc", ADAPTERS["pi"], "img", "fix it", "bundle-pi", base_commit="abc")
        session = PooledSession("sid.pi.1.abc", "sk", prepare(runtime, spec, Wiring(gateway.url, "sk")))
        pools: StagePools[SessionPlan, PooledSession, SessionFacts] = StagePools(
            OneSession(stages, session), PoolLimits(1, 1, 1, 0), on_result, failed=stages.failed
        )
        asyncio.run(pools.run([Job(plan.key, plan, 100.0)]))
    if step == "row_twice":  # the error row itself cannot be written: logged and counted, the run goes on
        assert rows == [] and pools.failed == 1 and calls[0] == 2
        return
    ((kind, row),) = rows
    assert kind == "error" and row["status"] == "POSTRUN_ERROR" and row["key"] == plan.key
    stage = "the result callback" if step == "row" else "POSTRUN"
    assert row["reason"] == f"postrun_error: {stage} raised Injected: injected at {step}"
    assert row["session_id"] == "sid.pi.1.abc" and row["timing"]["postrun"] >= 0
    assert pools.finished == 1 and pools.failed == 0


def test_a_postrun_error_after_a_run_error_keeps_both_in_its_reason(tmp_path: Path) -> None:
    recipe = parse_recipe(RECIPE, [])
    runtime = FakeRuntime(session_responder(result("done")))
    with ThreadPoolExecutor(1) as pool:
        stages = GenerateStages(recipe, SessionSteps(runtime, pool), Gateway(tmp_path), tmp_path, None)  # type: ignore[arg-type]
        plan = SessionPlan("org__repo-1::pi::1", INSTANCE, ADAPTERS["pi"], 1, "img", "bundle-pi")
        end = RunEnd("run_error", error="docker went away")
        facts = stages.failed(Job(plan.key, plan, 1.0), None, end, Timings(), "POSTRUN raised OSError: EIO")
    kind, row = build_row(facts, {})
    assert kind == "error"
    assert row["reason"] == "postrun_error: POSTRUN raised OSError: EIO (after run_error: docker went away)"
