"""evaluate_instance on SWE-bench 5 rows (their eval_script, log_parser, eval_type) and on the chosen network."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from swe_fakes import FakeRuntime, marked_log, result

from polar_cli.runtime.base import ExecResult
from polar_cli.swe.evaluate import DEFAULT_NETWORK, EVAL_DIR, EvalJob, EvalOptions, evaluate_instance, run_job
from polar_cli.swe.manifest import Instance
from polar_cli.swe.row_script import row_eval_script

ROW_SCRIPT = "#!/bin/bash\nset -uxo pipefail\n: '>>>>> Start Test Output'\nrun-tests\n: '>>>>> End Test Output'\n"
INSTANCE = Instance(
    instance_id="o__r-1",
    repo="o/unknown",  # no known test command: the row's script needs none
    base_commit="a" * 40,
    problem_statement="",
    patch="diff --git a/src.py b/src.py\n--- a/src.py\n+++ b/src.py\n@@ -1 +1 @@\n-a\n+b\n",
    test_patch="diff --git a/tests/t.py b/tests/t.py\n--- a/tests/t.py\n+++ b/tests/t.py\n@@ -1 +1 @@\n-a\n+b\n",
    fail_to_pass=("test_bug (t.Case.test_bug)",),
    pass_to_pass=("test_ok (t.Case.test_ok)",),
    eval_script=ROW_SCRIPT,
    log_parser="parse_log_django",
)
OPTIONS = EvalOptions(image="img:1", timeout=60)
APPLIED = result(">>>>> Applied Patch (git apply --verbose)\n")


def respond(eval_log: str):  # type: ignore[no-untyped-def]
    def answer(script: str, files: Mapping[str, bytes]) -> ExecResult:
        return APPLIED if script == "apply.sh" else result(eval_log)

    return answer


def test_the_rows_script_runs_and_its_parser_reads_the_log() -> None:
    log = marked_log("test_bug (t.Case.test_bug) ... ok", "test_ok (t.Case.test_ok) ... ok")
    runtime = FakeRuntime(respond(log))
    evaluation = evaluate_instance(runtime, INSTANCE, INSTANCE.patch, OPTIONS)
    (container,) = runtime.containers
    assert container.files[f"{EVAL_DIR}/eval.sh"] == row_eval_script(ROW_SCRIPT).encode()
    # the django parser keys "test_bug (t.Case.test_bug)"; pytest's would find nothing here
    assert evaluation.outcome == "resolved", evaluation.grade


def test_fail_only_rows_fail_only_reported_failures() -> None:
    # only the PASS_TO_PASS test is reported; FAIL_TO_PASS is absent: a success under fail_only, not otherwise
    log = marked_log("PASSED test_ok (t.Case.test_ok)", "Executed 1 of 1 SUCCESS")
    pytest_row = dataclasses.replace(INSTANCE, log_parser="parse_log_pytest_v2")
    fail_only = dataclasses.replace(pytest_row, eval_type="fail_only")
    assert evaluate_instance(FakeRuntime(respond(log)), fail_only, "x", OPTIONS).outcome == "resolved"
    assert evaluate_instance(FakeRuntime(respond(log)), pytest_row, "x", OPTIONS).outcome == "unresolved"
    failed = marked_log("FAILED test_bug (t.Case.test_bug)", "PASSED test_ok (t.Case.test_ok)")
    assert evaluate_instance(FakeRuntime(respond(failed)), fail_only, "x", OPTIONS).outcome == "unresolved"


def test_a_parser_polar_lacks_is_an_error_before_any_container() -> None:
    runtime = FakeRuntime(respond(marked_log("PASSED x")))
    go = dataclasses.replace(INSTANCE, log_parser="parse_log_gotest")
    evaluation = run_job(runtime, EvalJob(go, INSTANCE.patch, OPTIONS))
    assert evaluation.outcome == "error" and runtime.containers == []
    assert "'parse_log_gotest' (swebench's): Polar has no parser for this test runner" in (evaluation.reason or "")


def test_the_container_gets_the_chosen_network_and_the_report_says_so() -> None:
    log = marked_log("test_bug (t.Case.test_bug) ... ok", "test_ok (t.Case.test_ok) ... ok")
    for network in (DEFAULT_NETWORK, "none"):
        runtime = FakeRuntime(respond(log))
        evaluation = evaluate_instance(runtime, INSTANCE, INSTANCE.patch, dataclasses.replace(OPTIONS, network=network))
        assert runtime.specs[0].network == network and evaluation.to_dict()["network"] == network
    assert DEFAULT_NETWORK == "bridge"  # swebench 5.0.2: containers.create without a network, Docker's default
    # no container, no network
    assert evaluate_instance(FakeRuntime(respond(log)), INSTANCE, None, OPTIONS).to_dict()["network"] is None
