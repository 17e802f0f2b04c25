"""POSTRUN starts the fresh container a SWE instance is graded in while the agent's container is still collected
(`TaskKind.grader`, `node.session_steps.Ahead`), and every container it starts is removed once, whatever happens:
graded, nothing to grade, collecting raised, or the grading container failed to start (issue 27.4).

The fake runtime stands in for Docker: it shows the order of the calls and the removals, not Docker's timings."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from polar_cli.config import parse_recipe
from polar_cli.errors import RuntimeFailure
from polar_cli.generate.rows import build_row
from polar_cli.generate.stages import GenerateStages, PooledSession, SessionPlan
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionSpec, prepare
from polar_cli.node.pools import Job, RunEnd, Timings
from polar_cli.node.session_steps import SessionSteps
from polar_cli.runtime.base import ContainerSpec, ExecResult
from tests.support.fake_runtime import FakeContainer, FakeRuntime
from tests.unit.generate.test_generate_patch_parses import INSTANCE, responder
from tests.unit.generate.test_generate_rows import OK_RUN, RECIPE
from tests.unit.generate.test_generate_session_logs import Gateway


class WatchedRuntime(FakeRuntime):
    """A fake runtime that says when a grading container has started, and can fail to start one."""

    def __init__(self, fail_eval_start: bool = False, wait: float = 5.0) -> None:
        super().__init__(self.respond_watched)
        self.eval_started = threading.Event()
        self.collect_saw_eval = False
        self.fail_eval_start = fail_eval_start
        self.wait = wait  # how long collecting waits for the grading container to start

    def start(self, spec: ContainerSpec) -> FakeContainer:
        if spec.role == "eval" and self.fail_eval_start:
            self.fail_eval_start = False  # the grading's own start, after the one ahead failed, succeeds
            raise RuntimeFailure("engine hiccup")
        container = super().start(spec)
        if spec.role == "eval":
            self.eval_started.set()
        return container

    def respond_watched(self, name: str, container: FakeContainer) -> ExecResult:
        if name == "polar-collect":  # the agent's container is collected: the grading one starts meanwhile
            self.collect_saw_eval = self.eval_started.wait(timeout=self.wait)
        return responder(name, container)


def postrun(tmp_path: Path, runtime: FakeRuntime, run: RunEnd | None = None) -> dict[str, object]:
    run = run or RunEnd("ok", OK_RUN)
    with ThreadPoolExecutor(4) as pool:
        gateway = Gateway(tmp_path / "capture")
        stages = GenerateStages(parse_recipe(RECIPE, []), SessionSteps(runtime, pool), gateway, tmp_path, None)  # type: ignore[arg-type]
        plan = SessionPlan("org__repo-1::pi::1", INSTANCE, ADAPTERS["pi"], 1, "img:1", "bundle-pi")
        spec = SessionSpec("sid.pi.1.abc", ADAPTERS["pi"], "img:1", "fix it", "bundle-pi", base_commit="abc")
        session = PooledSession("sid.pi.1.abc", "sk", prepare(runtime, spec, Wiring(gateway.url, "sk")))
        facts = asyncio.run(stages.postrun(Job(plan.key, plan, 100.0), session, run, Timings()))
    return build_row(facts, {})[1]


def roles(runtime: FakeRuntime) -> list[tuple[str, int]]:
    return [(c.spec.role, c.removed) for c in runtime.started]


def test_the_grading_container_starts_while_the_agents_is_collected_and_grades_the_patch(tmp_path: Path) -> None:
    runtime = WatchedRuntime()
    row = postrun(tmp_path, runtime)
    assert runtime.collect_saw_eval, "the grading container was not started before collecting ended"
    assert row["eval"]["resolved"]  # type: ignore[index]
    assert roles(runtime) == [("session", 1), ("eval", 1)]  # the one started ahead graded: no second one
    assert runtime.started[1].scripts == ["apply.sh", "eval.sh"]


def test_a_session_without_a_run_starts_no_grading_container(tmp_path: Path) -> None:
    runtime = WatchedRuntime(wait=0.0)
    row = postrun(tmp_path, runtime, RunEnd("error", None, "the harness could not start"))
    assert not runtime.eval_started.is_set() and roles(runtime) == [("session", 1)]  # no run: nothing to grade
    assert row["eval"] is None


def test_collecting_that_raises_leaves_no_grading_container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = WatchedRuntime()

    def broken(*args: object) -> object:
        runtime.eval_started.wait(timeout=5.0)
        raise RuntimeError("collect broke")

    monkeypatch.setattr("polar_cli.harness.session.finish", broken)
    with pytest.raises(RuntimeError, match="collect broke"):
        postrun(tmp_path, runtime)
    assert [(role, removed) for role, removed in roles(runtime) if role == "eval"] == [("eval", 1)]


def test_a_grading_container_that_fails_to_start_ahead_is_started_again_by_the_grading(tmp_path: Path) -> None:
    runtime = WatchedRuntime(fail_eval_start=True, wait=0.0)
    row = postrun(tmp_path, runtime)
    assert row["eval"]["resolved"] and roles(runtime) == [("session", 1), ("eval", 1)]  # type: ignore[index]
