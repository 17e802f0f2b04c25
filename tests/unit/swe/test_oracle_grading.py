"""SWE-bench 5.0.2's grading itself as the oracle: eval_type fail_only (``check_fail_only``) and the SUITE_RAN check
give the same verdicts in Polar's pure grading as in swebench's functions, on the same status maps and logs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from swebench.harness.constants import EvalType
from swebench.harness.grading import SUITE_RAN, get_eval_report, get_eval_tests_report, get_resolution_status

from polar_cli.swe import grading
from polar_cli.swe.grading import EVAL_TYPES, grade_log, grade_tests, resolution, suite_ran
from polar_cli.swe.logparse import TestStatus, parser_for

P, F, S, E, X = TestStatus.PASSED, TestStatus.FAILED, TestStatus.SKIPPED, TestStatus.ERROR, TestStatus.XFAIL
F2P, P2P = ["f1", "f2", "f3"], ["p1", "p2"]
# every status, and absence, in both lists
STATUS_MAPS = [
    {},
    {"f1": P, "f2": P, "f3": P, "p1": P, "p2": P},
    {"f1": F, "f2": P, "f3": P, "p1": P, "p2": P},
    {"f1": E, "f2": S, "f3": X, "p1": E, "p2": S},
    {"f1": P, "p1": F},
    {"f2": X, "p2": P, "other": F},
    {"f1": F, "f2": F, "f3": F, "p1": F, "p2": F},
]


def theirs(status_map: dict[str, TestStatus], eval_type: str) -> tuple[dict[str, Any], str]:
    gold = {"FAIL_TO_PASS": F2P, "PASS_TO_PASS": P2P}
    report = get_eval_tests_report({k: v.value for k, v in status_map.items()}, gold, eval_type=EvalType(eval_type))
    return report, get_resolution_status(report)


def test_eval_types_are_swebenchs() -> None:
    assert set(EVAL_TYPES) == {t.value for t in EvalType}


@pytest.mark.parametrize("eval_type", EVAL_TYPES)
@pytest.mark.parametrize("status_map", STATUS_MAPS)
def test_grade_tests_is_swebenchs_report(status_map: dict[str, TestStatus], eval_type: grading.EvalType) -> None:
    report, status = theirs(status_map, eval_type)
    ours = grade_tests(status_map, F2P, P2P, eval_type)
    assert ours.to_swebench() == report
    assert resolution(ours).value == status


def test_fail_only_fails_only_reported_failures() -> None:
    ours = grade_tests({"f1": E, "f2": S, "p1": F}, F2P, P2P, "fail_only")
    assert (ours.fail_to_pass_failure, ours.pass_to_pass_failure) == ((), ("p1",))
    assert grade_tests({"f1": E}, F2P, P2P).fail_to_pass_failure == ("f1", "f2", "f3")  # pass_and_fail differs


def wrap(body: str) -> str:
    return f"{grading.START_TEST_OUTPUT}\n{body}\n{grading.END_TEST_OUTPUT}\n"


# logs whose pytest parse is empty: only a runner's own count can show the suite ran (or, with a zero, that it did not)
SUITE_LOGS = {
    "nothing": "",
    "karma ran": "Chrome Headless: Executed 12 of 12 SUCCESS (0.3 secs / 0.2 secs)",
    "karma ran nothing": "Chrome Headless: Executed 0 of 0 ERROR (0.001 secs / 0 secs)",
    "karma total": "TOTAL: 4 SUCCESS",
    "mocha": "  7 passing (31ms)",
    "mocha nothing": "  0 passing (1ms)",
    "jest": "Tests:       3 passed, 3 total",
    "jest suites": "Test Suites: 1 skipped, 2 passed, 3 total",
    "jest nothing": "Tests:       0 total",
    "tap": "TAP version 13\n# tests 5\n# pass 5",
    "tap zero": "# tests 0",
    "jasmine": "12 specs, 0 failures",
    "openlayers": "rendering case 'heatmap-layer': ok",
    "openlayers not at line end": "case 'x': ok, then more",
    "a crash": "Traceback (most recent call last):\nImportError: no module named x",
}


@pytest.mark.parametrize("name", sorted(SUITE_LOGS))
def test_suite_ran_is_swebenchs(name: str) -> None:
    log = wrap(SUITE_LOGS[name])
    assert suite_ran(log) is (SUITE_RAN.search(log) is not None)


def test_the_suite_logs_cover_both_answers() -> None:
    answers = {suite_ran(wrap(log)) for log in SUITE_LOGS.values()}
    assert answers == {True, False}


@pytest.mark.parametrize("eval_type", EVAL_TYPES)
@pytest.mark.parametrize("name", sorted(SUITE_LOGS))
def test_a_log_without_tests_grades_as_swebench_502(name: str, eval_type: grading.EvalType, tmp_path: Path) -> None:
    log = wrap(SUITE_LOGS[name]) + f"{grading.TEST_EXIT_CODE}: 0\n"
    path = tmp_path / "test_output.txt"
    path.write_text(log)
    spec = SimpleNamespace(
        instance_id="i", FAIL_TO_PASS=F2P, PASS_TO_PASS=P2P, log_parser="parse_log_pytest", eval_type=eval_type
    )
    pred = {"instance_id": "i", "model_patch": "x", "model_name_or_path": "m"}
    report = get_eval_report(spec, pred, str(path), True)["i"]  # type: ignore[arg-type]
    ours = grade_log(log, F2P, P2P, parser_for("o/r", "parse_log_pytest"), eval_type)
    assert ours.resolved is report["resolved"]
    assert (ours.tests is not None) is report["patch_successfully_applied"]  # 5.0.2: the log was found usable
    if ours.tests is not None:
        assert ours.tests.to_swebench() == report["tests_status"]
    else:
        assert ours.reason == "the log reports no test, and nothing in it shows the test suite ran"


def test_fail_only_with_no_sign_of_a_run_is_unresolved_not_resolved() -> None:
    # the case SUITE_RAN exists for: every test absent would be a success under fail_only
    parser = parser_for("o/r", "parse_log_pytest")
    assert not grade_log(wrap("karma: browser failed to launch"), F2P, P2P, parser, "fail_only").resolved
    assert grade_log(wrap("Executed 3 of 3 SUCCESS"), F2P, P2P, parser, "fail_only").resolved
