"""Every graded session's whole evaluation logs in the run directory; the row's link and excerpt; validate --harness."""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from polar_cli.config import parse_recipe
from polar_cli.generate import validate as harness_validate
from polar_cli.generate.rows import build_row
from polar_cli.generate.session_logs import TAIL_CHARS, log_excerpt, run_logs, write_session_logs
from polar_cli.generate.stages import GenerateStages, PooledSession, SessionPlan
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionSpec, prepare
from polar_cli.node.pools import Job, RunEnd, Timings
from polar_cli.node.session_steps import SessionSteps
from polar_cli.swe import grading
from polar_cli.swe.eval_logs import RunLogs
from polar_cli.swe.evaluate import Evaluation
from polar_cli.swe.logparse import TestStatus
from tests.support.fake_runtime import FakeRuntime, result, session_responder
from tests.unit.generate.test_generate_rows import INSTANCE, OK_RUN, RECIPE

APPLY = "Checking patch a.py...\nApplied patch a.py cleanly.\n"
FAILED_LINE = "FAILED tests/test_a.py::t1 - AssertionError: assert 1 == 2"


def failing_evaluation(model: str = "m") -> Evaluation:
    """An unresolved run whose test output is far longer than the row's excerpt."""
    output = "".join(f"tests/test_a.py::filler_{i} PASSED\n" for i in range(2000))
    output += "tests/test_a.py::t1 FAILED\n" + "x" * 100 + "\n" + FAILED_LINE + "\nEND OF RUN\n"
    status_map = {"t1": TestStatus.FAILED, "t2": TestStatus.PASSED}
    verdicts = grading.grade_tests(status_map, ["t1"], ["t2"])
    grade = grading.Grade(False, grading.ResolvedStatus.NO, verdicts)
    return Evaluation(
        "org__repo-1", model, "unresolved", grade, patch_applied=True, log=APPLY + output, apply_log=APPLY
    )


def test_the_excerpt_is_the_tail_and_the_lines_of_the_failed_tests() -> None:
    evaluation = failing_evaluation()
    excerpt = log_excerpt(evaluation)
    assert excerpt["tail"] == evaluation.test_output[-TAIL_CHARS:] and excerpt["tail"].endswith("END OF RUN\n")
    assert len(excerpt["tail"]) == TAIL_CHARS < len(evaluation.test_output)
    # the last lines naming t1 (pytest's result line and its summary line); t2 passed, so it is not looked up
    assert excerpt["failing"] == ["tests/test_a.py::t1 FAILED", FAILED_LINE]
    resolved = Evaluation("i", "m", "resolved", grading.Grade(True, grading.ResolvedStatus.FULL, None), log="ok\n")
    assert log_excerpt(resolved) == {"tail": "ok\n", "failing": []}


def test_each_session_gets_its_own_directory_whole_and_atomic(tmp_path: Path) -> None:
    logs = run_logs(tmp_path, "nightly")
    evaluation = failing_evaluation("org/model")
    first = write_session_logs(logs, evaluation, "org__repo-1.pi.1.aaaaaa")
    second = write_session_logs(logs, evaluation, "org__repo-1.codex.1.bbbbbb")
    assert first == "logs/run_evaluation/nightly/org__model/org__repo-1.pi.1.aaaaaa/test_output.txt"
    assert first != second
    directory = (tmp_path / first).parent
    assert (tmp_path / first).read_text() == evaluation.test_output  # whole, byte for byte
    assert (directory / "run_instance.log").read_text() == APPLY
    report = json.loads((directory / "report.json").read_text())
    assert report["instance_id"] == "org__repo-1" and report["log_path"] == first
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]
    assert run_logs(tmp_path / "run-7", None).run_id == "run-7"  # no recipe name: the run directory's


class Gateway:
    """What the stages use of the node's gateway."""

    def __init__(self, capture_dir: Path) -> None:
        self.engine = SimpleNamespace(model="org/model")
        self.capture = SimpleNamespace(capture_dir=capture_dir)
        self.url = "http://127.0.0.1:1"
        self.closed: list[str] = []

    def close_session(self, key: str) -> None:
        self.closed.append(key)

    def flush(self) -> None:
        pass

    def records(self, session_id: str) -> list[Any]:
        return []


@pytest.mark.parametrize("keep_artifacts", [True, False])
def test_postrun_writes_the_logs_always_and_the_row_links_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep_artifacts: bool
) -> None:
    recipe = parse_recipe({**RECIPE, "name": "nightly"}, [f"output.keep_artifacts={str(keep_artifacts).lower()}"])
    runtime = FakeRuntime(session_responder(result("done")))
    evaluation = failing_evaluation("org/model")
    with ThreadPoolExecutor(2) as pool:
        gateway = Gateway(tmp_path / "capture")
        stages = GenerateStages(recipe, SessionSteps(runtime, pool), gateway, tmp_path, None)  # type: ignore[arg-type]
        monkeypatch.setattr(stages, "_evaluate", lambda plan, patch, ready: evaluation)
        plan = SessionPlan("org__repo-1::pi::1", INSTANCE, ADAPTERS["pi"], 1, "img", "bundle-pi")
        spec = SessionSpec("sid.pi.1.abc", ADAPTERS["pi"], "img", "fix it", "bundle-pi", base_commit="abc")
        session = PooledSession("sid.pi.1.abc", "sk", prepare(runtime, spec, Wiring(gateway.url, "sk")))
        job = Job(plan.key, plan, 100.0)
        facts = asyncio.run(stages.postrun(job, session, RunEnd("ok", OK_RUN), Timings()))
    _, row = build_row(facts, {})
    log_path = row["eval"]["log_path"]
    assert log_path == "logs/run_evaluation/nightly/org__model/sid.pi.1.abc/test_output.txt"
    assert (tmp_path / log_path).read_text() == evaluation.test_output
    assert row["eval"]["log_excerpt"]["failing"][-1] == FAILED_LINE and "log_tail" not in row["eval"]
    assert len(row["eval"]["log_excerpt"]["tail"]) == TAIL_CHARS
    assert not (tmp_path / "artifacts/sid.pi.1.abc/eval.log").exists()  # the whole log lives in one place
    # INIT's strip counts travel to the row
    assert row["stripped"]["refs"] == 2 and row["stripped"]["repacked"] is True


def test_a_session_that_was_not_graded_links_no_log() -> None:
    from tests.unit.generate.test_generate_rows import facts

    _, row = build_row(facts(evaluation=None), {})
    assert row["eval"] is None and row["stripped"] is None


def test_validate_through_a_harness_keeps_each_sessions_logs_beside_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, Any] = {}

    def fake_generate(recipe: Any, run_dir: Path, live: bool = True) -> None:
        # what a generate run leaves: a row linking its log, and the log
        seen["name"] = recipe.name
        logs = run_logs(run_dir, recipe.name)
        path = write_session_logs(logs, failing_evaluation("polar-gold"), "org__repo-1.pi.1.abcdef")
        row = {"instance_id": "org__repo-1", "accepted": False, "reason": "unresolved", "eval": {"log_path": path}}
        (run_dir / "rejects.jsonl").write_text(json.dumps(row) + "\n")

    monkeypatch.setattr("polar_cli.generate.run.generate", fake_generate)
    logs = RunLogs(tmp_path / "reports", "val-1")
    (tmp_path / "reports").mkdir()
    results = harness_validate.validate_through_harness(
        "m.jsonl", "pi", selection={}, workers=1, timeout=60.0, logs=logs
    )
    (only,) = results
    assert seen["name"] == "val-1" and not only.accepted
    assert only.log_path == "logs/run_evaluation/val-1/polar-gold/org__repo-1.pi.1.abcdef/test_output.txt"
    assert (logs.root / only.log_path).read_text() == failing_evaluation().test_output
    assert (logs.root / only.log_path).with_name("report.json").exists()
