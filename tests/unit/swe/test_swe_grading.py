"""SWE-bench's grading rules (polar_cli/swe/grading.py docstring), one edge case per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from polar_cli.swe import grading
from polar_cli.swe.grading import (
    END_TEST_OUTPUT,
    START_TEST_OUTPUT,
    TEST_EXIT_CODE,
    ResolvedStatus,
    grade_log,
    grade_tests,
    resolution,
)
from polar_cli.swe.logparse import TestStatus, parse_log_pytest

P, F, S, E, X = TestStatus.PASSED, TestStatus.FAILED, TestStatus.SKIPPED, TestStatus.ERROR, TestStatus.XFAIL
START, END = grading.START_TEST_OUTPUT, grading.END_TEST_OUTPUT


def wrap(body: str, before: str = "", after: str = "") -> str:
    return f"{before}{START}\n{body}\n{END}\n{after}"


def test_all_pass_resolves() -> None:
    report = grade_tests({"a": P, "b": P}, ["a"], ["b"])
    assert (report.fail_to_pass_success, report.pass_to_pass_success) == (("a",), ("b",))
    assert resolution(report) is ResolvedStatus.FULL


def test_skipped_pass_to_pass_counts_as_kept() -> None:
    report = grade_tests({"a": P, "b": S}, ["a"], ["b"])
    assert report.pass_to_pass_success == ("b",)
    assert resolution(report) is ResolvedStatus.FULL


def test_skipped_fail_to_pass_counts_as_failed() -> None:
    report = grade_tests({"a": S}, ["a"], [])
    assert report.fail_to_pass_failure == ("a",)
    assert resolution(report) is ResolvedStatus.NO


def test_xfail_counts_as_passing_in_both_groups() -> None:
    assert resolution(grade_tests({"a": X, "b": X}, ["a"], ["b"])) is ResolvedStatus.FULL


@pytest.mark.parametrize("status", [F, E])
def test_failed_or_errored_pass_to_pass_breaks_it(status: TestStatus) -> None:
    report = grade_tests({"a": P, "b": status}, ["a"], ["b"])
    assert report.pass_to_pass_failure == ("b",)
    assert resolution(report) is ResolvedStatus.NO


def test_test_missing_from_the_log_counts_as_failed() -> None:
    report = grade_tests({"a": P}, ["a", "gone"], ["also_gone"])
    assert report.fail_to_pass_failure == ("gone",)
    assert report.pass_to_pass_failure == ("also_gone",)
    assert report.observed == {"a": P, "gone": None, "also_gone": None}
    assert resolution(report) is ResolvedStatus.NO


def test_some_fail_to_pass_is_partial_and_unresolved() -> None:
    log = wrap("PASSED t::a\nFAILED t::b\nPASSED t::c")
    grade = grade_log(log, ["t::a", "t::b"], ["t::c"], parse_log_pytest)
    assert grade.status is ResolvedStatus.PARTIAL
    assert not grade.resolved


def test_empty_lists_are_satisfied() -> None:
    assert resolution(grade_tests({}, [], [])) is ResolvedStatus.FULL


@pytest.mark.parametrize(
    ("marker", "reason"),
    [
        (grading.APPLY_PATCH_FAIL, "the patch did not apply"),
        (grading.TEST_PATCH_FAIL, "the test patch did not apply"),
        (grading.RESET_FAILED, "resetting the test files failed"),
        (grading.TESTS_TIMEOUT, "the tests timed out"),
        (grading.TESTS_ERROR, "the tests errored"),
    ],
)
def test_failure_marker_anywhere_makes_it_unresolved(marker: str, reason: str) -> None:
    log = wrap("PASSED t::a", after=f"{marker}\n")
    grade = grade_log(log, ["t::a"], [], parse_log_pytest)
    assert (grade.resolved, grade.tests, grade.reason) == (False, None, reason)


@pytest.mark.parametrize("log", ["PASSED t::a\n" + END, START + "\nPASSED t::a\n", "PASSED t::a\n"])
def test_missing_marker_makes_it_unresolved(log: str) -> None:
    grade = grade_log(log, ["t::a"], [], parse_log_pytest)
    assert (grade.resolved, grade.reason) == (False, "the test-output markers are missing")


def test_only_the_text_between_the_markers_is_read() -> None:
    log = wrap("FAILED t::a", before="PASSED t::a\n", after="PASSED t::a\n")
    assert not grade_log(log, ["t::a"], [], parse_log_pytest).resolved


def test_whole_log_is_read_when_nothing_is_between_the_markers() -> None:
    log = wrap("no tests ran", after="PASSED t::a\n")
    assert grade_log(log, ["t::a"], [], parse_log_pytest).resolved


def test_swebench_first_word_names_grade_like_full_ids() -> None:
    log = wrap("PASSED t.py::test_x[a b]\nFAILED t.py::test_y[c d] - boom")
    assert grade_log(log, ["t.py::test_x[a"], [], parse_log_pytest).resolved
    assert grade_log(log, ["t.py::test_x[a b]"], [], parse_log_pytest).resolved
    assert not grade_log(log, ["t.py::test_y[c"], [], parse_log_pytest).resolved


def test_real_log_with_xpass_in_pass_to_pass_is_unresolved() -> None:
    # SWE-bench knows no XPASS: the test is absent, so a PASS_TO_PASS test that XPASSes counts as failed
    log = (Path(__file__).parent / "data" / "pytest7_rA.log").read_text()
    grade = grade_log(
        wrap(log), ["tests/test_outcomes.py::test_passes"], ["tests/test_outcomes.py::test_xpass"], parse_log_pytest
    )
    assert grade.tests is not None
    assert grade.tests.pass_to_pass_failure == ("tests/test_outcomes.py::test_xpass",)
    assert not grade.resolved


def test_reports_in_swebench_shape_and_per_test() -> None:
    report = grade_tests({"a": P, "b": S, "c": F}, ["a", "x"], ["b", "c"])
    assert report.to_swebench() == {
        "FAIL_TO_PASS": {"success": ["a"], "failure": ["x"]},
        "PASS_TO_PASS": {"success": ["b"], "failure": ["c"]},
        "FAIL_TO_FAIL": {"success": [], "failure": []},
        "PASS_TO_FAIL": {"success": [], "failure": []},
    }
    assert report.per_test() == [
        {"test": "a", "group": "FAIL_TO_PASS", "status": "PASSED", "ok": True},
        {"test": "x", "group": "FAIL_TO_PASS", "status": "MISSING", "ok": False},
        {"test": "b", "group": "PASS_TO_PASS", "status": "SKIPPED", "ok": True},
        {"test": "c", "group": "PASS_TO_PASS", "status": "FAILED", "ok": False},
    ]


def test_spoofed_passed_lines_with_nonzero_exit_are_no_verdict_like_swebench_502(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from swebench.harness.grading import get_logs_eval

    body = "PASSED tests/t.py::test_bug\nPASSED tests/t.py::test_ok\n"
    for code, ours_graded in ((1, False), (0, True)):
        log = f"{START_TEST_OUTPUT}\n{body}{END_TEST_OUTPUT}\n{TEST_EXIT_CODE}: {code}\n"
        (tmp_path / "log").write_text(log)
        _, found = get_logs_eval(SimpleNamespace(log_parser="parse_log_pytest"), str(tmp_path / "log"))  # type: ignore[arg-type]
        grade = grade_log(log, ["tests/t.py::test_bug"], ["tests/t.py::test_ok"], parse_log_pytest)
        assert found is ours_graded and grade.resolved is ours_graded
    assert grade_log(log.replace(": 0", ": 2"), [], [], parse_log_pytest).reason == (
        "the test command exited 2 but the log reports no failing test"
    )
    # a real failure explains the non-zero exit: graded normally, as 5.0.2 does
    failing = log.replace("PASSED tests/t.py::test_ok", "FAILED tests/t.py::test_ok").replace(": 0", ": 1")
    assert grade_log(failing, [], ["tests/t.py::test_ok"], parse_log_pytest).tests is not None
