"""A Harbor session's row: task_kind, reward and rewards; no ``no_patch`` reject; a verifier fault is an error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from polar_cli.generate.rows import SessionFacts, build_row
from polar_cli.generate.state import STATE, state_entry
from polar_cli.generate.summary import summarize
from polar_cli.harbor.tasks import load_task
from polar_cli.harbor.verify import _evaluation, error_verdict
from polar_cli.harness.session import Collected, HarnessRun
from polar_cli.node.pools import RunEnd
from polar_cli.trajectory import per_request
from tests.unit.generate.test_generate_rows import record

ROOT = Path(__file__).resolve().parents[3]
TASK = load_task(ROOT / "recipes" / "demo-terminal" / "log-summary")
OK_RUN = HarnessRun("ok", 0, b"out", 1.0)


def facts(resolved: bool | None, rewards: dict[str, float] | None, patch: str = "") -> SessionFacts:
    evaluation = (
        error_verdict(TASK, "m", "no reward file").evaluation
        if resolved is None
        else _evaluation(TASK, "m", resolved, None if resolved else "reward 0 below", "log", 0.0)
    )
    records = [record(0)]
    return SessionFacts(
        key="log-summary::pi::1",
        session_id="s",
        instance=TASK.instance("img"),
        harness="pi",
        attempt=1,
        model="m",
        end=RunEnd("ok", OK_RUN),
        harness_run=OK_RUN,
        collected=Collected(patch, ()),
        records=records,
        build=per_request(records),
        evaluation=evaluation,
        task_kind="harbor",
        rewards=rewards,
        reward=rewards.get("reward") if rewards else None,
    )


def test_an_accepted_harbor_row_carries_its_kind_and_named_rewards() -> None:
    rewards = {"reward": 1.0, "requests": 1.0, "errors": 1.0}
    kind, row = build_row(facts(True, rewards), {"run": 1.0})
    assert kind == "accepted" and row["accepted"] is True
    assert row["task_kind"] == "harbor" and row["reward"] == 1.0 and row["rewards"] == rewards
    # no patch is no reject: a terminal task's work need not be a file change in its workdir
    assert row["patch"] == "" and row["reason"] is None


def test_a_reward_below_the_threshold_is_a_reject_with_its_values() -> None:
    rewards = {"reward": 0.0, "requests": 1.0, "errors": 0.0}
    kind, row = build_row(facts(False, rewards), {})
    assert kind == "rejected" and row["reason"].startswith("unresolved: reward 0 below")
    assert row["reward"] == 0.0 and row["rewards"] == rewards


def test_a_verifier_that_left_no_reward_is_an_error_the_next_run_retries() -> None:
    kind, row = build_row(facts(None, None), {})
    assert kind == "error" and row["status"] == "EVAL_ERROR" and "no reward file" in row["reason"]
    assert row["reward"] == 0.0 and row["task_kind"] == "harbor"


def test_the_summary_counts_sessions_by_task_kind(tmp_path: Path) -> None:
    import orjson

    _, harbor = build_row(facts(True, {"reward": 1.0}), {})
    swe: dict[str, Any] = {**harbor, "key": "swe::pi::1", "task_kind": "swe", "accepted": False}
    old = {k: v for k, v in harbor.items() if k != "task_kind"} | {"key": "old::pi::1"}  # a row from before
    lines = [orjson.dumps(state_entry(r, 1, 0.0)) for r in (harbor, swe, old)]
    (tmp_path / STATE).write_bytes(b"\n".join(lines) + b"\n")
    summary = summarize(tmp_path, gpus=0, planned=3, engine="gold", model="m", segment=1)
    assert summary["by_task_kind"]["harbor"] == {"attempts": 1, "accepted": 1, "acceptance_rate": 1.0}
    assert summary["by_task_kind"]["swe"]["attempts"] == 2
