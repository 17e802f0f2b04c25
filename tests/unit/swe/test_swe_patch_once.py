"""A patch is parsed once per evaluation and the parsed `diffs.Patch` handed on: every consumer takes it without
parsing again, and `run_job` parses the candidate's patch once for all its tries (issue 27.4, 29.3)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator, Mapping

import pytest
from swe_fakes import FakeRuntime, marked_log, result

from polar_cli.runtime.base import ExecResult
from polar_cli.swe import diffs
from polar_cli.swe.diffs import Patch, file_changes, runner_targets, touched_paths
from polar_cli.swe.evaluate import EVAL_DIR, EvalJob, EvalOptions, evaluate_instance, run_job
from polar_cli.swe.manifest import Instance
from polar_cli.swe.scripts import eval_script, runner_directives
from polar_cli.swe.tamper import config_paths, drop_files, find_tampering, screen_patch

MODEL = (
    "diff --git a/src/app.py b/src/app.py\n--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-a\n+b\n"
    "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n"
    "--- /dev/null\n+++ b/conftest.py\n@@ -0,0 +1 @@\n+x\n"
    "diff --git a/setup.cfg b/setup.cfg\n--- a/setup.cfg\n+++ b/setup.cfg\n@@ -3 +3 @@ [tool:pytest]\n-a = 1\n+a = 2\n"
    "diff --git a/tests/test_app.py b/tests/test_app.py\n--- a/tests/test_app.py\n+++ b/tests/test_app.py\n"
    "@@ -1 +1 @@\n-old\n+new\n"
)
TESTS = (
    "diff --git a/tests/test_app.py b/tests/test_app.py\n--- a/tests/test_app.py\n+++ b/tests/test_app.py\n"
    "@@ -1 +1 @@\n-old\n+newer\n"
    "diff --git a/tests/data.json b/tests/data.json\n--- a/tests/data.json\n+++ b/tests/data.json\n"
    "@@ -1 +1 @@\n-1\n+2\n"
)
INSTANCE = Instance(
    "o__r-1", "o/r", "a" * 40, "", MODEL, TESTS, ("tests/test_app.py::test_bug",), ("tests/test_app.py::test_ok",),
    test_cmd="pytest -rA",
)  # fmt: skip
OPTIONS = EvalOptions(image="img:1", timeout=60)
APPLIED = result(">>>>> Applied Patch (git apply --verbose)\n")
FIXED = result(marked_log("PASSED tests/test_app.py::test_bug", "PASSED tests/test_app.py::test_ok"))


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """`diffs.split_patch` calls, counted by the text parsed."""
    counted: Counter[str] = Counter()
    real = diffs.split_patch

    def split_patch(patch: str) -> tuple[str, list[diffs.FileDiff]]:
        counted[patch] += 1
        return real(patch)

    monkeypatch.setattr(diffs, "split_patch", split_patch)
    yield counted


def test_the_parsed_patch_is_the_text_byte_for_byte_and_so_is_what_is_left_of_it() -> None:
    patch = Patch.parse(MODEL)
    assert patch.text == MODEL == patch.preamble + "".join(f.text for f in patch.files)
    kept = patch.without(["conftest.py"])
    assert kept.text == drop_files(MODEL, ["conftest.py"]) and kept.files == Patch.parse(kept.text).files
    assert Patch.of(patch) is patch


def test_every_consumer_takes_the_parsed_patch_and_parses_it_no_more(parses: Counter[str]) -> None:
    screened, screen_check = screen_patch(MODEL, TESTS, "revert", repo="o/r")
    by_text = {
        "changes": file_changes(MODEL),
        "touched": touched_paths(MODEL),
        "targets": runner_targets(TESTS),
        "configs": config_paths(MODEL, TESTS),
        "findings": find_tampering(MODEL, TESTS, repo="o/r", test_cmd="pytest -rA"),
        "screened": (screened.text, screen_check),
        "dropped": drop_files(MODEL, ["conftest.py"]),
        "script": eval_script(INSTANCE, "pytest -rA", f"{EVAL_DIR}/test.patch"),
        "directives": runner_directives(INSTANCE),
    }
    assert parses[MODEL] > 1 and parses[TESTS] > 1  # the string API parses at every call
    parses.clear()
    model, tests = Patch.parse(MODEL), Patch.parse(TESTS)
    kept, check = screen_patch(model, tests, "revert", repo="o/r")
    by_patch = {
        "changes": file_changes(model),
        "touched": touched_paths(model),
        "targets": runner_targets(tests),
        "configs": config_paths(model, tests),
        "findings": find_tampering(model, tests, repo="o/r", test_cmd="pytest -rA"),
        "screened": (kept.text, check),
        "dropped": drop_files(model, ["conftest.py"]),
        "script": eval_script(INSTANCE, "pytest -rA", f"{EVAL_DIR}/test.patch", test_patch=tests),
        "directives": runner_directives(INSTANCE, tests),
    }
    assert by_patch == by_text
    assert parses == {MODEL: 1, TESTS: 1}


def cut_then_fixed(script: str, files: Mapping[str, bytes], runs: list[ExecResult]) -> ExecResult:
    """The first test run loses its markers (a machinery error, tried again), the second passes."""
    return APPLIED if script == "apply.sh" else runs.pop(0)


def test_run_job_parses_the_patch_once_for_every_try(parses: Counter[str]) -> None:
    runs = [result("cut short\n", None), FIXED]
    runtime = FakeRuntime(lambda script, files: cut_then_fixed(script, files, runs))
    job = EvalJob(INSTANCE, MODEL, dataclasses.replace(OPTIONS, tamper="revert"), "m")
    evaluation = run_job(runtime, job)
    assert evaluation.outcome == "resolved" and len(runtime.containers) == 2
    assert evaluation.tamper is not None and evaluation.tamper.reverted == ("conftest.py", "setup.cfg")
    assert parses[MODEL] == 1
    assert parses[TESTS] == 2  # the instance's, once per try
    # both tries applied what the tamper check kept of the one parse
    (applied,) = {c.files[f"{EVAL_DIR}/model.patch"] for c in runtime.containers}
    assert applied == drop_files(MODEL, ["conftest.py", "setup.cfg"]).encode()


def test_a_parsed_patch_is_evaluated_as_its_text_is(parses: Counter[str]) -> None:
    patch = "diff --git a/src/app.py b/src/app.py\n--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-a\n+b\n"
    by_text, by_patch = (
        FakeRuntime(lambda s, f: cut_then_fixed(s, f, [FIXED])),
        FakeRuntime(lambda s, f: cut_then_fixed(s, f, [FIXED])),
    )
    from_text = evaluate_instance(by_text, INSTANCE, patch, OPTIONS, "m")
    parsed = Patch.parse(patch)
    parses.clear()
    from_patch = evaluate_instance(by_patch, INSTANCE, parsed, OPTIONS, "m")
    assert parses[patch] == 0
    assert from_text.outcome == from_patch.outcome == "resolved" and from_patch.tamper == from_text.tamper
    assert by_patch.containers[0].files == by_text.containers[0].files


def test_a_patch_the_parser_refuses_is_an_error_on_every_try_as_before() -> None:
    broken = 'diff --git "a/x\\x" "b/x\\x"\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n'
    with pytest.raises(ValueError):
        Patch.parse(broken)
    evaluation = run_job(FakeRuntime(lambda script, files: APPLIED), EvalJob(INSTANCE, broken, OPTIONS, "m"))
    assert evaluation.outcome == "error" and evaluation.reason is not None
    assert evaluation.reason.startswith("evaluation failed: invalid \\x escape")
