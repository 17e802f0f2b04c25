"""Which file a finished session's row goes to, with what status and reason; the row's shape; the summary."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, get_args

import pytest

from polar_cli.capture import CaptureRecord
from polar_cli.config import parse_recipe
from polar_cli.errors import ConfigError
from polar_cli.generate.rows import REASONS, SessionFacts, build_row, segment_rows, verdict
from polar_cli.generate.stages import GenerateStages
from polar_cli.generate.state import STATE, state_entry
from polar_cli.generate.summary import render_summary, summarize
from polar_cli.harness.session import Collected, HarnessRun
from polar_cli.node.pools import RunEnd
from polar_cli.swe import grading
from polar_cli.swe.evaluate import Evaluation
from polar_cli.swe.manifest import Instance
from polar_cli.trajectory import per_request
from polar_cli.trajectory.stats import SplitKind

RECIPE = {"manifest": {"source": "m.jsonl"}, "harnesses": ["pi"], "engine": {"kind": "gold", "tokenizer": "qwen3"}}
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
        normalized={"messages": [{"role": "user", "content": "Fix it."}], "tools": [{"type": "function"}]},
        response={"choices": [{"message": {"role": "assistant", "content": "done"}}]},
        prompt_ids=[1, 2, 3],
        response_ids=[4, 5],
        response_logprobs=[-0.1, -0.2],
        finish_reason="stop",
    )


BAD_RUN = HarnessRun("harness_error", 1, b"", 1.0)


def failed(seq: int, status: str, kind: str | None) -> CaptureRecord:
    return dataclasses.replace(
        record(seq), status=status, error="too long", error_kind=kind, response=None, prompt_ids=[], response_ids=[],
        response_logprobs=[],
    )  # fmt: skip


def summary(seq: int) -> CaptureRecord:
    """A side call that offers no tools (a compaction's summary, a title)."""
    return dataclasses.replace(record(seq), normalized={"messages": [{"role": "user", "content": "Summarize."}]})


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
        ({"records": []}, ("rejected", "OK", "no_trainable_call: no model call has token ids")),
        (
            {"collected": Collected(" \n", ()), "evaluation": evaluation("unresolved")},
            ("rejected", "OK", "no_patch: the harness ended normally without changing the repository"),
        ),
        # the last call did not fit: whatever the harness did next (here: exit 1), the reason is the overflow
        (
            {"records": [record(0), failed(1, "upstream_error", "context_length")], "harness_run": BAD_RUN},
            ("rejected", "CONTEXT_OVERFLOW", "context_overflow: call 1: too long"),
        ),
        # opencode's loop: refused, a summary call (no tools) that fits, refused again ... until its timeout
        (
            {
                "records": [
                    failed(0, "upstream_error", "context_length"),
                    record(1),
                    failed(2, "upstream_error", "context_length"),
                    summary(3),
                ],
                "harness_run": HarnessRun("timeout", None, b"", 9.0),
            },
            ("rejected", "CONTEXT_OVERFLOW", "context_overflow: call 2: too long"),
        ),
        # the engine failed a call: never a reject, whatever became of the session
        (
            {"records": [record(0), failed(1, "upstream_error", "upstream")], "harness_run": BAD_RUN},
            ("error", "UPSTREAM_ERROR", "upstream_error: call 1: too long"),
        ),
        (
            {"records": [failed(0, "upstream_error", "timeout")], "evaluation": evaluation("unresolved")},
            ("error", "UPSTREAM_ERROR", "upstream_error: call 0: too long"),
        ),
        # the gateway refused the harness's request (e.g. a tool type it cannot translate)
        (
            {"records": [failed(0, "client_error", "invalid_request")], "harness_run": BAD_RUN},
            ("error", "GATEWAY_ERROR", "gateway_error: call 0: too long"),
        ),
        # the harness hung up on a call (killed at its timeout): its own doing, not the machinery's
        (
            {"records": [record(0), failed(1, "client_error", None)], "harness_run": BAD_RUN},
            ("rejected", "HARNESS_ERROR", "harness_error: the harness exited with 1"),
        ),
        # a transient engine failure the harness got past: the resolved session stays accepted
        ({"records": [failed(0, "upstream_error", "overloaded"), record(1)]}, ("accepted", "OK", None)),
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
    got = verdict(facts(**changes))
    assert got == expected
    reason = got[2]
    assert reason is None or reason.split(":")[0] in REASONS, f"{reason!r}: its code is not documented"


def test_the_row_has_the_corpus_fields() -> None:
    kind, row = build_row(facts(), {"init": 1.0, "run": 2.0})
    assert kind == "accepted"
    assert row["accepted"] is True and row["reward"] == 1.0 and row["status"] == "OK" and row["reason"] is None
    assert row["traces"][0]["response_ids"] == [4, 5] and row["traces"][0]["loss_mask"] == [1, 1]
    (segment,) = segment_rows(row)  # what the corpus holds: one row per trace
    assert segment["messages"][-1] == {
        "role": "assistant", "content": "done", "reasoning_content": None, "tool_calls": [], "tool_call_id": None,
        "name": None,
    }  # fmt: skip
    assert json.loads(segment["tools"]) == [{"type": "function"}]
    assert (segment["trace_index"], segment["trace_count"], segment["lineage"]["kind"]) == (0, 1, "root")
    assert segment["trace"]["response_ids"] == [4, 5] and "messages" not in segment["trace"]
    assert segment["key"] == row["key"] and "traces" not in segment
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


def chat_record(seq: int, prompt: list[int], sampled: list[int]) -> CaptureRecord:
    return dataclasses.replace(
        record(seq), prompt_ids=prompt, response_ids=sampled, response_logprobs=[-0.5] * len(sampled)
    )


E = 2
FIRST = [6, 7, 10, E, 6, 8, 40, E, 3]  # system, user, then the assistant's opening


def drifting_records() -> list[CaptureRecord]:
    """Call 1 renders call 0's answer [20 21] as [20 99]; call 2 extends call 1; call 3 is a title request."""
    p1 = [*FIRST, 20, 99, E, 5, 30, E, 3]
    p2 = [*p1, 22, E, 5, 31, E, 3]
    title = [6, 7, 10, E, 6, 8, 60, E, 3]
    return [
        chat_record(0, FIRST, [20, 21, E]),
        chat_record(1, p1, [22, E]),
        chat_record(2, p2, [23, E]),
        chat_record(3, title, [61, E]),
    ]


@pytest.mark.parametrize(
    ("drift", "merged", "drift_tokens", "split_counts", "merge_rate"),
    [("tolerant", 2, 1, {"side_request": 1}, 1.0), ("strict", 1, 0, {"drift": 1, "side_request": 1}, 0.5)],
)
def test_the_builder_follows_builder_drift_and_rows_carry_the_merge_stats(
    drift: str, merged: int, drift_tokens: int, split_counts: dict[str, int], merge_rate: float
) -> None:
    recipe = parse_recipe(RECIPE, [f"builder.drift={drift}"])
    records = drifting_records()
    build = GenerateStages._build(SimpleNamespace(recipe=recipe, eot_token_id=E), records)  # type: ignore[arg-type]
    _, row = build_row(facts(records=records, build=build), {})
    stats = row["stats"]
    assert stats["completions_total"] == 4 and stats["completions_merged"] == merged
    assert stats["conversations"] == 2  # the session's first call and the title request
    every_kind = {**dict.fromkeys(get_args(SplitKind), 0), **split_counts}  # one schema for every row (Parquet)
    assert (stats["drift_tokens"], stats["split_counts"], stats["merge_rate"]) == (
        drift_tokens,
        every_kind,
        merge_rate,
    )
    assert stats["chains_truncated"] == (drift == "strict")  # a side request truncates nothing
    assert [t["metadata"]["drift_tokens"] for t in row["traces"]][:1] == [drift_tokens]
    entry = state_entry(row, 1, 0.0)
    assert entry["merge"] == {
        "completions_total": 4, "completions_merged": merged, "conversations": 2, "turns_drifted": drift_tokens,
        "drift_tokens": drift_tokens, "token_in_calls": 0, "compactions": 0, "subagents": 0,
        "split_counts": every_kind,
    }  # fmt: skip


def test_an_unknown_builder_drift_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="drift"):
        parse_recipe(RECIPE, ["builder.drift=lenient"])


def test_summary_adds_up_the_merge_stats(tmp_path: Path) -> None:
    merges = [
        {"completions_total": 10, "completions_merged": 8, "conversations": 1, "turns_drifted": 2, "drift_tokens": 7,
         "token_in_calls": 9, "compactions": 1, "split_counts": {"side_request": 1, "retry": 1}},
        {"completions_total": 5, "completions_merged": 3, "conversations": 2, "turns_drifted": 0, "drift_tokens": 0,
         "split_counts": {"side_request": 1}},
        None,  # a state line written before merge stats were kept
    ]  # fmt: skip
    entries = [{"type": "segment", "segment": 1, "t": 0.0}]
    for i, merge in enumerate(merges):
        entries.append({
            "type": "session", "key": f"k{i}", "segment": 1, "t": 10.0, "instance_id": f"i{i}", "repo": "a/x",
            "harness": "pi", "attempt": 1, "accepted": True, "status": "OK", "reason": None, "calls": 3,
            "timing": {}, **({"merge": merge} if merge else {}),
        })  # fmt: skip
    (tmp_path / STATE).write_text("".join(json.dumps(e) + "\n" for e in entries))
    summary = summarize(tmp_path, gpus=1, planned=3, engine="gold", model="q", segment=1)
    assert summary["merge"] == {
        "sessions": 2, "completions_total": 15, "completions_merged": 11, "conversations": 3, "turns_drifted": 2,
        "drift_tokens": 7, "token_in_calls": 9, "compactions": 1, "subagents": 0, "merge_rate": round(11 / 12, 4),
        "splits": {"retry": 1, "side_request": 2},
    }  # fmt: skip
    render_summary(summary)
