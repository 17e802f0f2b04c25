"""INIT starts the fresh container a SWE instance will be graded in, in the background, once the agent's container
is prepared (`TaskKind.grader`, `node.session_steps.Ahead`, `PooledSession.grader`); POSTRUN grades in it. Every
container a session starts is removed once, whatever happens: graded, nothing to grade, collecting raised, the
grading container failed to start ahead, or the session was discarded before POSTRUN, its grading container still
starting or already up (issue 27.4).

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
from polar_cli.harness import ADAPTERS
from polar_cli.node.pools import Job, RunEnd, Timings
from polar_cli.node.session_steps import SessionSteps
from polar_cli.runtime.base import ContainerSpec
from tests.support.fake_runtime import FakeContainer, FakeRuntime
from tests.unit.generate.test_generate_patch_parses import INSTANCE, responder
from tests.unit.generate.test_generate_rows import OK_RUN, RECIPE
from tests.unit.generate.test_generate_session_logs import Gateway

PLAN = SessionPlan("org__repo-1::pi::1", INSTANCE, ADAPTERS["pi"], 1, "img:1", "bundle-pi")
JOB = Job(PLAN.key, PLAN, 100.0)
HOST_NETWORK = ["runtime.network=host"]  # no gateway-only sandbox to find


class OpeningGateway(Gateway):
    def open_session(self, session_id: str, task: object) -> str:
        return "sk"


class WatchedRuntime(FakeRuntime):
    """A fake runtime that can fail to start a grading container, or hold its start until ``go`` is set."""

    def __init__(self, fail_eval_start: bool = False) -> None:
        super().__init__(responder)
        self.fail_eval_start = fail_eval_start
        self.eval_starting = threading.Event()
        self.eval_started = threading.Event()
        self.go = threading.Event()
        self.go.set()

    def start(self, spec: ContainerSpec) -> FakeContainer:
        if spec.role == "eval":
            self.eval_starting.set()
            self.go.wait(timeout=5.0)
            if self.fail_eval_start:
                self.fail_eval_start = False  # the grading's own start, after the one ahead failed, succeeds
                raise RuntimeFailure("engine hiccup")
        container = super().start(spec)
        if spec.role == "eval":
            self.eval_started.set()
        return container


def session(
    tmp_path: Path, runtime: FakeRuntime, then: str = "postrun", run: RunEnd | None = None
) -> dict[str, object]:
    """INIT, then POSTRUN (its row) or a discard (no row)."""

    async def main(stages: GenerateStages) -> dict[str, object]:
        pooled = await stages.init(JOB, 100.0)
        if then == "discard":
            # discarded once its grading container is up, or still starting (``go`` held): not before the start began,
            # when there would be nothing to remove
            assert isinstance(runtime, WatchedRuntime)
            begun = runtime.eval_started if runtime.go.is_set() else runtime.eval_starting
            assert await asyncio.get_running_loop().run_in_executor(None, begun.wait, 5.0)
            await stages.discard(JOB, pooled)
            for _ in range(500):  # removed while the run goes on, not by the event loop's own shutdown
                if len(runtime.started) == 2 and all(c.removed for c in runtime.started):
                    break
                await asyncio.sleep(0.01)
            return {}
        facts = await stages.postrun(JOB, pooled, run or RunEnd("ok", OK_RUN), Timings())
        return build_row(facts, {})[1]

    with ThreadPoolExecutor(4) as pool:
        return asyncio.run(main(stages_of(runtime, pool, tmp_path)))


def stages_of(runtime: FakeRuntime, pool: ThreadPoolExecutor, tmp_path: Path) -> GenerateStages:
    gateway = OpeningGateway(tmp_path / "capture")
    recipe = parse_recipe(RECIPE, HOST_NETWORK)
    return GenerateStages(recipe, SessionSteps(runtime, pool), gateway, tmp_path, None)  # type: ignore[arg-type]


def roles(runtime: FakeRuntime) -> list[tuple[str, int]]:
    return [(c.spec.role, c.removed) for c in runtime.started]


def test_init_starts_the_grading_container_and_postrun_grades_the_patch_in_it(tmp_path: Path) -> None:
    runtime = WatchedRuntime()
    row = session(tmp_path, runtime)
    assert row["eval"]["resolved"]  # type: ignore[index]
    assert roles(runtime) == [("session", 1), ("eval", 1)]  # the one started at INIT graded: no second one
    assert runtime.started[1].scripts == ["apply.sh", "eval.sh"]


def test_init_leaves_the_grading_container_starting_in_the_background(tmp_path: Path) -> None:
    runtime = WatchedRuntime()
    runtime.go.clear()

    async def main(stages: GenerateStages) -> PooledSession:
        pooled = await stages.init(JOB, 100.0)  # returns while the grading container is still starting
        assert not runtime.eval_started.is_set() and pooled.grader is not None
        runtime.go.set()
        assert await pooled.grader.take() is runtime.started[1]
        return pooled

    with ThreadPoolExecutor(4) as pool:
        asyncio.run(main(stages_of(runtime, pool, tmp_path)))


def test_a_session_without_a_run_removes_its_grading_container_ungraded(tmp_path: Path) -> None:
    runtime = WatchedRuntime()
    row = session(tmp_path, runtime, run=RunEnd("error", None, "the harness could not start"))
    assert row["eval"] is None and roles(runtime) == [("session", 1), ("eval", 1)]
    assert runtime.started[1].scripts == []  # never used


def test_collecting_that_raises_leaves_no_grading_container(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = WatchedRuntime()

    def broken(*args: object) -> object:
        runtime.eval_started.wait(timeout=5.0)
        raise RuntimeError("collect broke")

    monkeypatch.setattr("polar_cli.harness.session.finish", broken)
    with pytest.raises(RuntimeError, match="collect broke"):
        session(tmp_path, runtime)
    assert [(role, removed) for role, removed in roles(runtime) if role == "eval"] == [("eval", 1)]


def test_a_grading_container_that_fails_to_start_ahead_is_started_again_by_the_grading(tmp_path: Path) -> None:
    runtime = WatchedRuntime(fail_eval_start=True)
    row = session(tmp_path, runtime)
    assert row["eval"]["resolved"] and roles(runtime) == [("session", 1), ("eval", 1)]  # type: ignore[index]


@pytest.mark.parametrize("still_starting", [False, True])
def test_a_session_discarded_before_postrun_removes_its_grading_container(tmp_path: Path, still_starting: bool) -> None:
    runtime = WatchedRuntime()
    if still_starting:
        runtime.go.clear()
        threading.Timer(0.2, runtime.go.set).start()  # up only after the discard: removed once its start returns
    session(tmp_path, runtime, then="discard")
    assert roles(runtime) == [("session", 1), ("eval", 1)]
