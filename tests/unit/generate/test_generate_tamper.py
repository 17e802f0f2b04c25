"""`polar generate` and the reward-hack check: the recipe's ``eval.tamper`` reaches the grader, a tampered attempt is a
reject of its own kind (never a corpus row), and the summary counts it apart from "unresolved"."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from polar_cli.capture import CaptureRecord
from polar_cli.config import parse_recipe
from polar_cli.errors import ConfigError
from polar_cli.generate.rows import SessionFacts, build_row, verdict
from polar_cli.generate.stages import GenerateStages
from polar_cli.generate.state import STATE, state_entry
from polar_cli.generate.summary import summarize
from polar_cli.harness.session import Collected, HarnessRun
from polar_cli.node.pools import RunEnd
from polar_cli.swe import grading
from polar_cli.swe.evaluate import EvalJob, Evaluation
from polar_cli.swe.manifest import Instance
from polar_cli.swe.tamper import Finding, TamperCheck, TamperMode
from polar_cli.tasks import kinds
from polar_cli.trajectory import per_request

RECIPE = {"manifest": {"source": "m.jsonl"}, "harnesses": ["pi"], "engine": {"kind": "gold", "tokenizer": "qwen3"}}
INSTANCE = Instance("org__repo-1", "org/repo", "abc", "Fix it.", "PATCH", "TEST", ("t1",), ("t2",))
RUN = HarnessRun("ok", 0, b"out", 1.0)
PLANTED = (Finding("conftest.py", "a pytest conftest.py"),)


def record() -> CaptureRecord:
    return CaptureRecord(
        session_id="s",
        seq=0,
        api="openai_chat",
        path="/v1/chat/completions",
        started=0.0,
        ended=1.0,
        status="ok",
        request={},
        normalized={"messages": [{"role": "user", "content": "Fix it."}], "tools": []},
        response={"choices": [{"message": {"role": "assistant", "content": "done"}}]},
        prompt_ids=[1, 2, 3],
        response_ids=[4, 5],
        response_logprobs=[-0.1, -0.2],
        finish_reason="stop",
    )


def session(evaluation: Evaluation) -> SessionFacts:
    records = [record()]
    return SessionFacts(
        "org__repo-1::pi::1", "s", INSTANCE, "pi", 1, "m", RunEnd("ok", RUN), RUN, Collected("PATCH", ()),
        records, per_request(records), evaluation,
    )  # fmt: skip


def rejected() -> Evaluation:
    check = TamperCheck("reject", PLANTED)
    return Evaluation("org__repo-1", "m", "unresolved", grading.unresolved(check.reason()), tamper=check)


def test_a_tampered_attempt_is_a_tamper_reject() -> None:
    assert verdict(session(rejected())) == ("rejected", "OK", "tamper: conftest.py")
    kind, row = build_row(session(rejected()), {})
    assert kind == "rejected" and row["accepted"] is False and row["reward"] == 0.0
    assert row["eval"]["tamper"]["findings"] == [
        {"path": "conftest.py", "why": "a pytest conftest.py", "module": False}
    ]


def test_a_reverted_attempt_that_resolves_is_accepted_and_says_what_was_reverted() -> None:
    check = TamperCheck("revert", PLANTED, ("conftest.py",))
    resolved = grading.Grade(True, grading.ResolvedStatus.FULL, None)
    kind, row = build_row(session(Evaluation("org__repo-1", "m", "resolved", resolved, tamper=check)), {})
    assert kind == "accepted" and row["eval"]["tamper"]["reverted"] == ["conftest.py"]


def test_the_summary_counts_tamper_apart_from_unresolved(tmp_path: Path) -> None:
    unresolved = Evaluation("org__repo-1", "m", "unresolved", grading.unresolved("tests failed"))
    lines = [{"type": "segment", "segment": 1, "t": 0.0}]
    for i, evaluation in enumerate((rejected(), rejected(), unresolved)):
        _, row = build_row(session(evaluation), {})
        lines.append(state_entry({**row, "key": f"k{i}"}, 1, 1.0))
    (tmp_path / STATE).write_text("".join(json.dumps(line) + "\n" for line in lines))
    summary = summarize(tmp_path, gpus=0, planned=3, engine="gold", model="m", segment=1)
    assert summary["reject_reasons"] == {"tamper": 2, "unresolved": 1} and summary["accepted"] == 0


@pytest.mark.parametrize(("overrides", "mode"), [([], "reject"), (["eval.tamper=revert"], "revert")])
def test_the_recipe_mode_reaches_the_grader(
    overrides: list[str], mode: TamperMode, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs: list[EvalJob] = []

    def run_job(runtime: Any, job: EvalJob, ready: Any = None) -> Evaluation:
        jobs.append(job)
        return rejected()

    monkeypatch.setattr(kinds, "run_job", run_job)
    owner = SimpleNamespace(grading=kinds.Grading(None, parse_recipe(RECIPE, overrides), "m"))  # type: ignore[arg-type]
    GenerateStages._evaluate(owner, SimpleNamespace(image="img:1", instance=INSTANCE, kind=kinds.SWE), "PATCH")  # type: ignore[arg-type]
    assert jobs[0].options.tamper == mode


def test_an_unknown_mode_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"eval\.tamper"):
        parse_recipe(RECIPE, ["eval.tamper=warn"])
