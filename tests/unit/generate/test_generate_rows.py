"""Which file a finished session's row goes to, with what status and reason; the row's shape; the summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import CaptureRecord
from polar_cli.generate.rows import SessionFacts, build_row, verdict
from polar_cli.generate.state import STATE
from polar_cli.generate.summary import render_summary, summarize
from polar_cli.harness.session import Collected, HarnessRun
from polar_cli.node.pools import RunEnd
from polar_cli.swe import grading
from polar_cli.swe.evaluate import Evaluation
from polar_cli.swe.manifest import Instance
from polar_cli.trajectory import per_request

INSTANCE = Instance("org__repo-1", "org/repo", "abc", "Fix it.", "PATCH", "TEST", ("t1",), ("t2",))
OK_RUN = HarnessRun("ok", 0, b"out", 1.0)


def record(seq: int) -> CaptureRecord:
    return CaptureRecord(
        session_id="s",
        seq=seq,
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


def evaluation(outcome: str) -> Evaluation:
    resolved = grading.Grade(True, grading.ResolvedStatus.FULL, None)
    grade = resolved if outcome == "resolved" else grading.unresolved("the patch did not apply")
    return Evaluation("org__repo-1", "m", outcome, grade)  # type: ignore[arg-type]


def facts(**kw: Any) -> SessionFacts:
    records = kw.pop("records", [record(0)])
    base: dict[str, Any] = {
        "key": "org__repo-1::pi::1",
        "session_id": "s",
        "instance": INSTANCE,
        "harness": "pi",
        "attempt": 1,
        "model": "m",
        "end": RunEnd("ok", OK_RUN),
        "harness_run": OK_RUN,
        "collected": Collected("PATCH", ()),
        "records": records,
        "build": per_request(records),
        "evaluation": evaluation("resolved"),
    }
    return SessionFacts(**(base | kw))


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, ("accepted", "OK", None)),
        ({"evaluation": evaluation("unresolved")}, ("rejected", "OK", "unresolved: the patch did not apply")),
        ({"records": []}, ("rejected", "OK", "no trainable model call (no call with token ids)")),
        (
            {"harness_run": HarnessRun("timeout", None, b"", 9.0)},
            ("rejected", "TIMEOUT", "timeout: the harness ran past its timeout"),
        ),
        (
            {"harness_run": HarnessRun("harness_error", 2, b"", 1.0)},
            ("rejected", "HARNESS_ERROR", "harness_error: the harness exited with 2"),
        ),
        # the pool's backstop cut a run that had made model calls: a partial trajectory, rejected
        (
            {"end": RunEnd("timeout", error="RUN overran"), "harness_run": None},
            ("rejected", "TIMEOUT", "timeout: RUN overran"),
        ),
        # machinery failures are errors: retried next run, never a verdict
        (
            {"end": RunEnd("init_error", error="no image"), "harness_run": None, "collected": None, "records": []},
            ("error", "INIT_ERROR", "init_error: no image"),
        ),
        (
            {"end": RunEnd("timeout", error="READY"), "harness_run": None, "records": []},
            ("error", "INIT_TIMEOUT", "init_timeout: READY"),
        ),
        ({"collected": Collected("", (), "bad object")}, ("error", "POSTRUN_ERROR", "postrun_error: bad object")),
        ({"evaluation": evaluation("error")}, ("error", "EVAL_ERROR", "eval_error: None")),
    ],
)
def test_verdicts(changes: dict[str, Any], expected: tuple[str, str, str | None]) -> None:
    assert verdict(facts(**changes)) == expected


def test_the_row_has_the_corpus_fields() -> None:
    kind, row = build_row(facts(), {"init": 1.0, "run": 2.0})
    assert kind == "accepted"
    assert row["accepted"] is True and row["reward"] == 1.0 and row["status"] == "OK" and row["reason"] is None
    assert row["messages"][-1] == {
        "role": "assistant", "content": "done", "reasoning_content": None, "tool_calls": [], "tool_call_id": None,
        "name": None,
    }  # fmt: skip
    assert json.loads(row["tools"]) == []
    assert row["traces"][0]["response_ids"] == [4, 5] and row["traces"][0]["loss_mask"] == [1, 1]
    assert row["patch"] == "PATCH" and row["eval"]["resolved"] is True and "log_tail" not in row["eval"]
    assert row["timing"] == {"init": 1.0, "run": 2.0, "eval": 0.0}
    assert row["stats"]["prompt_tokens"] == 3 and row["stats"]["trainable_tokens"] == 2


def test_summary_rates_tokens_and_gpu_hours(tmp_path: Path) -> None:
    entries = [{"type": "segment", "segment": 1, "t": 0.0}]
    for i, (harness, repo, accepted) in enumerate(
        [("pi", "a/x", True), ("pi", "a/x", False), ("codex", "a/x", True), ("codex", "b/y", True)]
    ):
        entries.append({
            "type": "session", "key": f"k{i}", "segment": 1, "t": 1800.0 * (i + 1) / 4, "instance_id": f"i{i}",
            "repo": repo, "harness": harness, "attempt": 1, "accepted": accepted, "status": "OK",
            "reason": None if accepted else "unresolved: tests failed", "calls": 3, "prompt_tokens": 100,
            "completion_tokens": 10, "trainable_tokens": 8, "timing": {"run": 2.0},
        })  # fmt: skip
    (tmp_path / STATE).write_text("".join(json.dumps(e) + "\n" for e in entries))
    summary = summarize(tmp_path, gpus=8, planned=5, engine="sglang", model="q", segment=1)
    assert summary["attempts"] == 4 and summary["accepted"] == 3 and summary["acceptance_rate"] == 0.75
    assert summary["pending"] == 1
    assert summary["by_harness"]["pi"] == {"attempts": 2, "accepted": 1, "acceptance_rate": 0.5}
    assert summary["by_repo"]["b/y"] == {"attempts": 1, "accepted": 1, "acceptance_rate": 1.0}
    assert summary["tokens"] == {"prompt": 400, "completion": 40, "trainable": 32}
    # 1800 s of wall time on 8 GPUs
    assert summary["wall_seconds"] == 1800.0 and summary["gpu_hours"] == 4.0
    assert summary["accepted_per_gpu_hour"] == 0.75
    assert summary["reject_reasons"] == {"unresolved": 1}
    render_summary(summary)  # renders without error
