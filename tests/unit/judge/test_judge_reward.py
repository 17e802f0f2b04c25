"""The judge's score meets the tests' reward (gate, weighted) in the row's verdict; a judge fault is an error row;
the recipe's judge section; POSTRUN's hook judges only what its policy wants and turns a JudgeError into one."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from polar_cli.config import load_recipe, parse_recipe
from polar_cli.errors import ConfigError
from polar_cli.generate.rows import REASONS, build_row, verdict
from polar_cli.generate.stages import GenerateStages
from polar_cli.judge.client import Judge, JudgeResult
from polar_cli.judge.reward import Policy
from tests.unit.generate.test_generate_rows import RECIPE, evaluation, facts
from tests.unit.judge.judge_support import GOOD, RUBRIC_YAML, ScriptedTransport, answer, rubric


def result(score: float, policy: Policy) -> JudgeResult:
    return JudgeResult(score, {"correctness": score, "process": score}, {}, [], "r" * 64, "p" * 64, "m", "engine", 1,
                       "artifacts/s/judge.jsonl", policy)  # fmt: skip


GATE = Policy("gate", 0.7)
WEIGHTED = Policy("weighted", 0.6, tests_weight=1.0, judge_weight=1.0)


@pytest.mark.parametrize(
    ("policy", "tests", "judge", "expected"),
    [
        (GATE, 1.0, 0.7, (1.0, True)),
        (GATE, 1.0, 0.69, (0.0, False)),
        (WEIGHTED, 1.0, 0.2, (0.6, True)),
        (WEIGHTED, 0.0, 1.0, (0.5, False)),
        (Policy("weighted", 0.5, 0.0, 1.0), 0.0, 0.5, (0.5, True)),
    ],
)
def test_combine(policy: Policy, tests: float, judge: float, expected: tuple[float, bool]) -> None:
    reward, passed = policy.combine(tests, judge)
    assert (reward, passed) == (pytest.approx(expected[0]), expected[1])


def test_the_gate_rejects_a_resolved_session_the_judge_scores_low() -> None:
    kind, row = build_row(facts(judge=result(0.5, GATE)), {})
    assert kind == "rejected" and row["reason"] == "judge: score 0.500 below the threshold 0.7"
    assert row["reward"] == 0.0 and row["judge"]["tests_reward"] == 1.0 and row["judge"]["passed"] is False
    kind, row = build_row(facts(judge=result(0.9, GATE)), {})
    assert kind == "accepted" and row["reward"] == 1.0 and row["judge"]["score"] == 0.9
    assert row["judge"]["rubric_sha256"] == "r" * 64 and row["judge"]["record"] == "artifacts/s/judge.jsonl"
    assert REASONS["judge"] and REASONS["judge_error"].startswith("error:")


def test_weighted_may_accept_an_unresolved_session_and_reject_a_resolved_one() -> None:
    unresolved = facts(evaluation=evaluation("unresolved"))
    assert verdict(dataclasses.replace(unresolved, judge=result(1.0, Policy("weighted", 0.5))))[0] == "accepted"
    assert verdict(dataclasses.replace(unresolved, judge=result(0.9, WEIGHTED)))[2].startswith("unresolved:")
    kind, _status, reason = verdict(facts(judge=result(0.1, WEIGHTED)))
    assert kind == "rejected" and reason is not None and reason.startswith("judge: reward 0.550 below")
    # a session with nothing trainable is never accepted, whatever the judge says
    empty = dataclasses.replace(unresolved, records=[], build=facts(records=[]).build)
    assert verdict(dataclasses.replace(empty, judge=result(1.0, Policy("weighted", 0.5))))[2].startswith(
        "no_trainable_call"
    )
    _, row = build_row(facts(), {})
    assert row["judge"] is None and row["reward"] == 1.0


def test_a_judge_fault_is_an_error_row_never_a_reward() -> None:
    kind, row = build_row(facts(judge_error="chunk 1/1 unscored after 4 calls: HTTP 503"), {})
    assert kind == "error" and row["status"] == "JUDGE_ERROR" and row["judge"] is None
    assert row["reason"] == "judge_error: chunk 1/1 unscored after 4 calls: HTTP 503"


def write_rubric(directory: Path) -> Path:
    path = directory / "rubric.yaml"
    path.write_bytes(RUBRIC_YAML)
    return path


def test_the_recipe_section_resolves_its_rubric_next_to_the_recipe_and_refuses_mistakes(tmp_path: Path) -> None:
    write_rubric(tmp_path)
    (tmp_path / "recipe.yaml").write_text(
        "manifest: {source: m.jsonl}\nharnesses: [pi]\nengine: {kind: gold, tokenizer: qwen3}\n"
        "judge: {rubric: rubric.yaml, url: 'http://judge:8000/v1', model: j, mode: weighted}\n"
    )
    recipe = load_recipe(tmp_path / "recipe.yaml")
    assert recipe.judge is not None and recipe.judge.rubric == str(tmp_path / "rubric.yaml")
    assert parse_recipe(RECIPE).judge is None
    for judge, message in [
        ({"rubric": str(tmp_path / "absent.yaml")}, "rubric"),
        ({"rubric": str(tmp_path / "rubric.yaml"), "url": "http://j/v1"}, "needs model"),
        ({"rubric": str(tmp_path / "rubric.yaml"), "api_key_env": "K"}, "api_key_env"),
        ({"rubric": str(tmp_path / "rubric.yaml"), "mode": "average"}, "mode"),
        ({"rubric": str(tmp_path / "rubric.yaml"), "chunk_chars": 1000, "message_chars": 2000}, "chunk_chars"),
        ({"rubric": str(tmp_path / "rubric.yaml"), "weights": {"tests": 0, "judge": 0}}, "above 0"),
        ({"rubric": str(tmp_path / "rubric.yaml"), "treshold": 0.5}, "treshold"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_recipe({**RECIPE, "judge": judge})


def stages(tmp_path: Path, mode: str, script: list[Any]) -> Any:
    recipe = parse_recipe({**RECIPE, "judge": {"rubric": str(write_rubric(tmp_path)), "mode": mode, "retries": 0}})
    assert recipe.judge is not None
    transport = ScriptedTransport(script)
    judge = Judge(recipe.judge, rubric(), transport, "m", "engine")
    return SimpleNamespace(judge=judge, run_dir=tmp_path), transport


def test_postrun_judges_what_its_policy_wants_and_records_the_calls_in_the_session_artifacts(tmp_path: Path) -> None:
    owner, transport = stages(tmp_path, "gate", [answer(GOOD)])
    judged = asyncio.run(GenerateStages._judged(owner, facts()))
    assert judged.judge is not None and judged.judge.score == pytest.approx(0.7)
    assert (tmp_path / "artifacts" / "s" / "judge.jsonl").is_file() and len(transport.bodies) == 1
    # the gate never judges a session the tests rejected: no call
    owner, transport = stages(tmp_path, "gate", [])
    unresolved = facts(evaluation=evaluation("unresolved"))
    assert asyncio.run(GenerateStages._judged(owner, unresolved)) == unresolved and transport.bodies == []
    # weighted does
    owner, transport = stages(tmp_path, "weighted", [answer(GOOD)])
    assert asyncio.run(GenerateStages._judged(owner, unresolved)).judge is not None


def test_postrun_turns_a_judge_fault_into_the_sessions_machinery_error(tmp_path: Path) -> None:
    owner, _ = stages(tmp_path, "gate", [answer("no idea")])
    judged = asyncio.run(GenerateStages._judged(owner, facts()))
    assert judged.judge is None and judged.judge_error is not None and "unscored" in judged.judge_error
    assert build_row(judged, {})[0] == "error"


def test_a_verifiers_reward_is_the_tests_reward_the_judge_combines_with() -> None:
    # a Harbor task's verifier said 0.5 (a partial reward): the weighted mean takes that, not 1.0 or 0.0
    kind, row = build_row(facts(reward=0.5, judge=result(1.0, WEIGHTED)), {})
    assert row["judge"]["tests_reward"] == 0.5 and row["reward"] == pytest.approx(0.75) and kind == "accepted"
