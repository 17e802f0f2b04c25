"""`polar evaluate` / `polar validate` and the reward-hack check: --tamper, its default, and --swe-bench-exact."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
from swe_fakes import FakeRuntime, marked_log, result
from typer.testing import CliRunner

from polar_cli.commands import swe_jobs
from polar_cli.commands.evaluate import evaluate
from polar_cli.commands.validate import validate
from polar_cli.runtime.base import ExecResult

GOLD = "diff --git a/src.py b/src.py\n--- a/src.py\n+++ b/src.py\n@@ -1 +1 @@\n-a\n+b\n"
CONFTEST = (
    "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
    "@@ -0,0 +1 @@\n+x\n"
)
TEST_PATCH = "diff --git a/tests/t.py b/tests/t.py\n--- a/tests/t.py\n+++ b/tests/t.py\n@@ -1 +1 @@\n-a\n+b\n"


def respond(script: str, files: Mapping[str, bytes]) -> ExecResult:
    # the fake repository: the fix makes t::bug pass, and so does a conftest.py (the attack)
    if script == "apply.sh":
        return result(">>>>> Applied Patch\n")
    patch = files["/tmp/polar-eval/model.patch"].decode()
    bug = "PASSED t::bug" if GOLD in patch or "conftest.py" in patch else "FAILED t::bug - x"
    return result(marked_log(bug, "PASSED t::ok"))


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeRuntime:
    monkeypatch.chdir(tmp_path)
    runtime = FakeRuntime(respond)
    monkeypatch.setattr(swe_jobs, "open_runtime", lambda: runtime)
    return runtime


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def manifest(tmp_path: Path, gold: str = GOLD) -> Path:
    row = {
        "instance_id": "o__r-1", "repo": "o/r", "base_commit": "a" * 40, "problem_statement": "", "patch": gold,
        "test_patch": TEST_PATCH, "FAIL_TO_PASS": ["t::bug"], "PASS_TO_PASS": ["t::ok"], "test_cmd": "pytest -rA",
        "image": "img:1",
    }  # fmt: skip
    return write_jsonl(tmp_path / "m.jsonl", [row])


def evaluate_cheat(tmp_path: Path, *flags: str) -> Any:
    preds = write_jsonl(
        tmp_path / "preds.jsonl", [{"instance_id": "o__r-1", "model_patch": GOLD + CONFTEST, "model_name_or_path": "m"}]
    )
    cli = typer.Typer(add_completion=False)
    cli.command("evaluate")(evaluate)
    cli.command("validate")(validate)
    return CliRunner().invoke(cli, ["evaluate", str(preds), "--manifest", str(manifest(tmp_path)), "--json", *flags])


def test_evaluate_rejects_by_default(fake: FakeRuntime, tmp_path: Path) -> None:
    run = evaluate_cheat(tmp_path)
    assert run.exit_code == 0, run.output
    (entry,) = orjson.loads(run.stdout)["instances"]
    assert (entry["outcome"], entry["reason"]) == ("unresolved", "tamper: conftest.py")
    assert entry["tamper"]["mode"] == "reject" and entry["tamper"]["rejected"] is True
    assert fake.containers[0].scripts == []


def test_evaluate_revert_grades_the_fix_alone(fake: FakeRuntime, tmp_path: Path) -> None:
    run = evaluate_cheat(tmp_path, "--tamper", "revert")
    (entry,) = orjson.loads(run.stdout)["instances"]
    assert entry["outcome"] == "resolved" and entry["tamper"]["reverted"] == ["conftest.py"]
    assert fake.containers[0].files["/tmp/polar-eval/model.patch"] == GOLD.encode()


def test_swe_bench_exact_grades_the_whole_patch(fake: FakeRuntime, tmp_path: Path) -> None:
    run = evaluate_cheat(tmp_path, "--swe-bench-exact")
    (entry,) = orjson.loads(run.stdout)["instances"]
    assert entry["outcome"] == "resolved" and entry["tamper"]["mode"] == "off"
    assert entry["tamper"]["findings"][0]["path"] == "conftest.py"  # still reported
    assert fake.containers[0].files["/tmp/polar-eval/model.patch"] == (GOLD + CONFTEST).encode()


@pytest.mark.parametrize("flags", [("--swe-bench-exact", "--tamper", "revert"), ("--tamper", "warn")])
def test_bad_tamper_flags_are_usage_errors(fake: FakeRuntime, tmp_path: Path, flags: tuple[str, ...]) -> None:
    run = evaluate_cheat(tmp_path, *flags)
    assert run.exit_code == 2 and not fake.containers


def test_validate_calls_a_gold_patch_that_tampers_broken(fake: FakeRuntime, tmp_path: Path) -> None:
    cli = typer.Typer(add_completion=False)
    cli.command("validate")(validate)
    cli.command("evaluate")(evaluate)
    path = str(manifest(tmp_path, GOLD + CONFTEST))
    run = CliRunner().invoke(cli, ["validate", path, "--json"])
    assert run.exit_code == 1
    (entry,) = orjson.loads(run.stdout)["instances"]
    assert entry["status"] == "broken" and "tamper: conftest.py" in entry["reasons"][0]
    exact = CliRunner().invoke(cli, ["validate", path, "--json", "--swe-bench-exact"])
    assert exact.exit_code == 0, exact.output
