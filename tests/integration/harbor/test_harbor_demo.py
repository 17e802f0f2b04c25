"""`polar generate recipes/demo-terminal.yaml` and `polar validate` on Harbor tasks, end to end: Pi in Docker.

Gold (each task's oracle, through Pi's shell tool) accepts every task and noop none; rows say task_kind harbor and
carry the verifier's named rewards; the harness was told instruction.md byte for byte; a rerun resumes with nothing
left, and a run killed with SIGKILL resumes without losing or duplicating a row; the tests are not in the container
while the agent runs; a verifier that writes no reward is an error the next run retries, never a reject; `polar
validate` finds every bundled task valid and flags tests that pass without the solution. Needs Docker and the images
scripts/setup-docker builds: a missing engine fails, never skips.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from polar_cli.errors import RuntimeFailure
from polar_cli.harbor.tasks import load_tasks
from polar_cli.runtime.base import MANAGED_LABEL, OWNER_LABEL
from polar_cli.runtime.docker import connect

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "recipes" / "demo-terminal.yaml"
TASKS = ROOT / "recipes" / "demo-terminal"
TIMEOUT = 900


@pytest.fixture(scope="module")
def docker_client() -> Any:
    try:
        return connect(timeout=600)
    except RuntimeFailure as exc:
        pytest.fail(f"{exc}; run scripts/setup-docker")


def polar(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "polar_cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=TIMEOUT)  # fmt: skip
    if ok:
        assert done.returncode == 0, f"exit {done.returncode}\n{done.stderr[-5000:]}"
    return done


def generate(out: Path, *overrides: str, ok: bool = True) -> dict[str, Any]:
    done = polar("generate", str(RECIPE), *overrides, "--out", str(out), "--json", ok=ok)
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_gold_accepts_every_task_through_pi_and_a_rerun_has_nothing_left(tmp_path: Path, docker_client: Any) -> None:
    tasks = {t.name: t for t in load_tasks(TASKS)}
    summary = generate(tmp_path)
    assert summary["attempts"] == summary["accepted"] == summary["planned"] == len(tasks)
    assert summary["by_task_kind"] == {"harbor": {"attempts": 3, "accepted": 3, "acceptance_rate": 1.0}}
    corpus = rows(tmp_path / "corpus.jsonl")
    assert {r["instance_id"] for r in corpus} == set(tasks) and rows(tmp_path / "rejects.jsonl") == []
    for row in corpus:
        task = tasks[row["instance_id"]]
        assert row["task_kind"] == "harbor" and row["reward"] == 1.0 and row["status"] == "OK"
        assert row["rewards"]["reward"] == 1.0 and all(v == 1.0 for v in row["rewards"].values())
        assert row["eval"]["outcome"] == "resolved" and (tmp_path / row["eval"]["log_path"]).is_file()
        # the harness was told instruction.md byte for byte; the oracle ran through its shell tool
        user = next(m for m in row["messages"] if m["role"] == "user")
        assert user["content"] == task.instruction
        calls = [c for m in row["messages"] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        assert len(calls) == 1 and "/solution/solve.sh" in calls[0]["function"]["arguments"]
        assert row["patch"].startswith("diff --git")  # the agent's changes, taken before the tests ran
    assert set(rows(tmp_path / "corpus.jsonl")[0]["rewards"]) <= {"reward", "requests", "errors", "top_ip"}
    assert {"requests", "errors", "top_ip"} <= set(
        next(r for r in corpus if r["instance_id"] == "log-summary")["rewards"]
    )
    again = generate(tmp_path)
    assert again["attempts"] == again["accepted"] == 3 and again["pending"] == 0
    assert len(rows(tmp_path / "corpus.jsonl")) == 3


def test_noop_rejects_every_task(tmp_path: Path, docker_client: Any) -> None:
    summary = generate(tmp_path, "engine.kind=noop")
    assert summary["accepted"] == 0 and summary["attempts"] == summary["planned"] == 3
    assert summary["errors_last_segment"] == 0
    for row in rows(tmp_path / "rejects.jsonl"):
        assert row["task_kind"] == "harbor" and row["reward"] == 0.0
        assert row["reason"].startswith("unresolved: reward 0 below the threshold 1"), row["reason"]


def fixture_task(root: Path, name: str, solve: str, test: str) -> Path:
    """A copy of the bundled top-words task with its own oracle and tests."""
    task = root / name
    shutil.copytree(TASKS / "top-words", task)
    (task / "solution" / "solve.sh").write_text(solve)
    (task / "tests" / "test.sh").write_text(test)
    (task / "tests" / "test.sh").chmod(0o755)
    return task


HIDDEN_SOLVE = "#!/bin/bash\nif [ -e /tests ]; then echo visible; else echo hidden; fi > /app/seen\n"
HIDDEN_TEST = (
    "#!/bin/bash\nmkdir -p /logs/verifier\n"
    'if [ "$(cat /app/seen)" = hidden ] && [ -x /tests/test.sh ]; then echo 1; else echo 0; fi'
    " > /logs/verifier/reward.txt\n"
)
SILENT_TEST = "#!/bin/bash\necho 'ran, wrote no reward'\n"


def test_tests_come_in_after_the_agent_and_a_missing_reward_is_retried(tmp_path: Path, docker_client: Any) -> None:
    tasks = tmp_path / "tasks"
    fixture_task(tasks, "tests-hidden", HIDDEN_SOLVE, HIDDEN_TEST)
    fixture_task(tasks, "no-reward", HIDDEN_SOLVE, SILENT_TEST)
    out = tmp_path / "run"
    summary = generate(out, f"manifest.source={tasks}", ok=False)
    assert summary["accepted"] == 1 and summary["errors_last_segment"] == 1
    assert [r["instance_id"] for r in rows(out / "corpus.jsonl")] == ["tests-hidden"]
    [error] = rows(out / "errors.jsonl")
    assert error["instance_id"] == "no-reward" and error["status"] == "EVAL_ERROR" and error["task_kind"] == "harbor"
    assert "no reward file" in error["reason"] and rows(out / "rejects.jsonl") == []
    again = generate(out, f"manifest.source={tasks}", ok=False)  # the error is not finished: it runs again
    assert again["errors_last_segment"] == 1 and len(rows(out / "errors.jsonl")) == 2


def test_validate_finds_the_bundled_tasks_valid_and_flags_tests_that_pass_without_the_solution(
    tmp_path: Path, docker_client: Any
) -> None:
    done = polar("validate", str(TASKS), "--json", "--out", str(tmp_path / "report.json"))
    payload = json.loads(done.stdout)
    assert payload["valid_instances"] == payload["total_instances"] == 3, payload
    for entry in payload["instances"]:
        assert entry["oracle_rewards"]["reward"] == 1.0 and entry["without_solution_rewards"]["reward"] == 0.0
        assert (tmp_path / entry["log_paths"]["oracle"]).is_file()
    tasks = tmp_path / "tasks"
    always = "#!/bin/bash\nmkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\n"
    fixture_task(tasks, "always-passes", HIDDEN_SOLVE, always)
    fixture_task(tasks, "wrong-oracle", "#!/bin/bash\ntrue\n", (TASKS / "top-words" / "tests" / "test.sh").read_text())
    broken = polar("validate", str(tasks), "--json", ok=False)
    assert broken.returncode == 1
    verdicts = {e["task"]: e for e in json.loads(broken.stdout)["instances"]}
    assert verdicts["always-passes"]["status"] == "broken"
    assert verdicts["always-passes"]["reasons"] == ["flagged: the tests pass without the solution"]
    assert verdicts["wrong-oracle"]["status"] == "broken"
    assert verdicts["wrong-oracle"]["reasons"] == ["oracle earns reward=0, not 1"]


def test_kill_9_mid_run_then_resume(tmp_path: Path, docker_client: Any) -> None:
    """One session at a time, killed once the first row is written: the rerun keeps it byte for byte, finishes the
    rest, duplicates nothing and sweeps the dead run's containers."""
    corpus = tmp_path / "corpus.jsonl"
    sequential = ["concurrency.init=1", "concurrency.run=1", "concurrency.postrun=1", "concurrency.ready=0"]
    argv = [sys.executable, "-m", "polar_cli", "generate", str(RECIPE), *sequential, "--out", str(tmp_path)]
    proc = subprocess.Popen([*argv, "--no-progress"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + TIMEOUT
    while not corpus.exists() or not corpus.read_bytes().endswith(b"\n"):
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "no rows appeared"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = corpus.read_bytes()
    assert 1 <= len(before.splitlines()) < 3, "kill the run earlier: it had finished"
    summary = generate(tmp_path, *sequential)
    after = corpus.read_bytes()
    assert after.startswith(before)  # every row written before the kill, byte for byte, in place
    keys = [json.loads(line)["key"] for line in after.splitlines()]
    assert len(keys) == len(set(keys)) == 3 and summary["accepted"] == 3 and summary["segments"] == 2
    owners = [
        c["Labels"].get(OWNER_LABEL, "")
        for c in docker_client.api.containers(all=True, filters={"label": f"{MANAGED_LABEL}=1"})
    ]
    assert not [o for o in owners if f":{proc.pid}:" in o]
