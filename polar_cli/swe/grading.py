"""SWE-bench's grading, as pure functions over a test log.

The rules (SWE-bench ``harness/grading.py``, restated):

- Rule 1, what passes: a test passes if the log reports it PASSED or XFAIL.
- Rule 1b, truncated ids (5.0.2's ``_resolve_case``): a test id the log lacks, with more ``[`` than ``]`` (a
  parametrised id cut at a space, as datasets built with first-word parsers hold: ``test_x[log(photon``), is the
  log's tests that start with it, when they agree on pass-or-fail (PASSED and XFAIL alike); when they disagree, or
  none does, the test is absent. Exact ids match exactly. fail_only looks ids up exactly (5.0.2 too).
- Rule 2, what fails: a test fails if the log reports it FAILED, ERROR or SKIPPED, or does not mention it.
- Rule 3, what is kept: a PASS_TO_PASS test is kept if it passes or is reported SKIPPED (a skip is no regression).
- Rule 4, resolved: every FAIL_TO_PASS test passes and every PASS_TO_PASS test is kept. An empty list counts as
  satisfied. Some but not all FAIL_TO_PASS passing, with every PASS_TO_PASS kept, is "partial": still unresolved.
- Rule 5, no verdict from a broken run: a log that carries a failure marker (patch or test patch did not apply,
  reset failed, tests errored or timed out), or lacks either test-output marker, makes the instance unresolved
  without looking at any test.
- Rule 5b, the exit code backs the log (5.0.2 ``get_logs_eval``): if the test command exited non-zero
  (``>>>>> Test Exit Code: N``, N != 0) and the parsed log has tests but none FAILED or ERROR, the log does not
  describe the run (e.g. a patch printing its own PASSED lines): no verdict, unresolved. No marker = no check.
- Rule 5c, the suite ran (5.0.2 ``SUITE_RAN``): a log that yields no test at all counts only if it shows a runner's
  own non-zero count of tests run (karma, mocha, jest, tap, jasmine, openlayers: `suite_ran`); else no verdict.
  Under fail_only an absent test is a success, so a suite that never started would otherwise resolve everything.
- Rule 6, where to read: only the text between the markers is parsed; if it yields no test at all, the whole log
  is parsed (some runners print results outside the markers).
- Eval type (a SWE-bench 5 row's ``eval_type``): ``pass_and_fail`` is Rules 1-3; ``fail_only`` (5.0.2's
  ``check_fail_only``) fails a test, FAIL_TO_PASS or PASS_TO_PASS alike, only if the log reports it FAILED: ERROR,
  SKIPPED and absent are successes (runners whose parsers record failures only).

The marker strings are SWE-bench's own, so logs stay readable by SWE-bench tooling.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, get_args

from polar_cli.swe.logparse import LogParser, TestStatus

APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
APPLY_PATCH_PASS = ">>>>> Applied Patch"
RESET_FAILED = ">>>>> Reset Failed"
TESTS_ERROR = ">>>>> Tests Errored"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
TEST_EXIT_CODE = ">>>>> Test Exit Code"
TEST_EXIT_CODE_VAR = "SWEBENCH_TEST_EXIT_CODE"
# the eval script echoes it after END_TEST_OUTPUT; the last one is the script's own (5.0.2 reads the first)
_TEST_EXIT_CODE = re.compile(rf"^{re.escape(TEST_EXIT_CODE)}:\s*(-?\d+)\s*$", re.MULTILINE)
# ours: SWE-bench lets a test patch that does not apply go on to run the tests; we stop there
TEST_PATCH_FAIL = ">>>>> Test Patch Apply Failed"

_FAILURE_MARKERS = {
    APPLY_PATCH_FAIL: "the patch did not apply",
    TEST_PATCH_FAIL: "the test patch did not apply",
    RESET_FAILED: "resetting the test files failed",
    TESTS_ERROR: "the tests errored",
    TESTS_TIMEOUT: "the tests timed out",
}

# SWE-bench 5.0.2's EvalType values, as a row's eval_type spells them
EvalType = Literal["pass_and_fail", "fail_only"]
EVAL_TYPES: tuple[EvalType, ...] = get_args(EvalType)

# 5.0.2's SUITE_RAN: a runner's own count of tests it ran, each count non-zero ("Executed 0 of 0" is a suite that
# started and ran nothing). These are JavaScript runners' lines: a Python run that ran a test yields a status map,
# so for Python rows the rule only turns a log without any test into no verdict.
_SUITE_RAN = re.compile(
    "|".join(
        (
            r"Executed [1-9]\d* of \d+",  # karma, per browser
            r"TOTAL: [1-9]\d* (?:SUCCESS|FAILED)",  # karma's summary
            r"[1-9]\d* passing",  # mocha
            r"Tests:\s+[1-9]\d*",  # jest
            r"Test Suites:\s+(?:\d+ \w+, )*[1-9]\d* total",  # jest
            r"^# tests [1-9]\d*",  # tap
            r"[1-9]\d* specs?, \d+ failures?",  # jasmine: all a clean run prints
            r"': ok$",  # openlayers' rendering cases at --log-level info
        )
    ),
    re.MULTILINE,
)

_PASSING = (TestStatus.PASSED, TestStatus.XFAIL)
_FAILING = (TestStatus.FAILED, TestStatus.ERROR, TestStatus.SKIPPED)


class ResolvedStatus(StrEnum):
    FULL = "RESOLVED_FULL"
    PARTIAL = "RESOLVED_PARTIAL"
    NO = "RESOLVED_NO"


def resolve_case(test: str, status_map: Mapping[str, TestStatus]) -> str | None:
    """Rule 1b: the status map's key for ``test`` (5.0.2's ``_resolve_case``), None when the log lacks it."""
    if test in status_map:
        return test
    if test.count("[") > test.count("]"):
        matches = [key for key in status_map if key.startswith(test)]
        if matches and len({status_map[key] in _PASSING for key in matches}) == 1:
            return matches[0]
    return None


def observed_status(test: str, status_map: Mapping[str, TestStatus]) -> TestStatus | None:
    key = resolve_case(test, status_map)
    return None if key is None else status_map[key]


def is_passing(test: str, status_map: Mapping[str, TestStatus]) -> bool:
    return observed_status(test, status_map) in _PASSING


def is_kept(test: str, status_map: Mapping[str, TestStatus]) -> bool:
    return observed_status(test, status_map) in (*_PASSING, TestStatus.SKIPPED)


def is_failing(test: str, status_map: Mapping[str, TestStatus]) -> bool:
    status = observed_status(test, status_map)
    return status is None or status in _FAILING


@dataclass(frozen=True, slots=True)
class Verdicts:
    """Which FAIL_TO_PASS / PASS_TO_PASS tests succeeded, in manifest order (SWE-bench's ``tests_status``)."""

    fail_to_pass_success: tuple[str, ...]
    fail_to_pass_failure: tuple[str, ...]
    pass_to_pass_success: tuple[str, ...]
    pass_to_pass_failure: tuple[str, ...]
    # the status each graded test was reported with; None = absent from the log
    observed: Mapping[str, TestStatus | None]

    def to_swebench(self) -> dict[str, dict[str, list[str]]]:
        return {
            "FAIL_TO_PASS": {"success": list(self.fail_to_pass_success), "failure": list(self.fail_to_pass_failure)},
            "PASS_TO_PASS": {"success": list(self.pass_to_pass_success), "failure": list(self.pass_to_pass_failure)},
            "FAIL_TO_FAIL": {"success": [], "failure": []},
            "PASS_TO_FAIL": {"success": [], "failure": []},
        }

    def per_test(self) -> list[dict[str, Any]]:
        """One row per graded test: its group, what the log said (``MISSING`` when absent), and the verdict."""
        rows = []
        groups = (
            ("FAIL_TO_PASS", self.fail_to_pass_success, self.fail_to_pass_failure),
            ("PASS_TO_PASS", self.pass_to_pass_success, self.pass_to_pass_failure),
        )
        for group, success, failure in groups:
            for test, ok in [(t, True) for t in success] + [(t, False) for t in failure]:
                status = self.observed.get(test)
                rows.append({"test": test, "group": group, "status": status or "MISSING", "ok": ok})
        return rows


def _grade_fail_only(
    status_map: Mapping[str, TestStatus], fail_to_pass: Sequence[str], pass_to_pass: Sequence[str]
) -> Verdicts:
    """eval_type fail_only (5.0.2's ``check_fail_only``): only a test reported FAILED fails, in both lists."""

    def split(tests: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        failed = tuple(t for t in tests if status_map.get(t) is TestStatus.FAILED)
        return tuple(t for t in tests if status_map.get(t) is not TestStatus.FAILED), failed

    observed = {t: status_map.get(t) for t in (*fail_to_pass, *pass_to_pass)}
    return Verdicts(*split(fail_to_pass), *split(pass_to_pass), observed)


def grade_tests(
    status_map: Mapping[str, TestStatus],
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    eval_type: EvalType = "pass_and_fail",
) -> Verdicts:
    """Sort each FAIL_TO_PASS and PASS_TO_PASS test into success or failure (Rules 1-3, or fail_only)."""
    if eval_type == "fail_only":
        return _grade_fail_only(status_map, fail_to_pass, pass_to_pass)
    f2p_success = [t for t in fail_to_pass if is_passing(t, status_map)]
    f2p_failure = [t for t in fail_to_pass if not is_passing(t, status_map) and is_failing(t, status_map)]
    p2p_success = [t for t in pass_to_pass if is_kept(t, status_map)]
    p2p_failure = [t for t in pass_to_pass if not is_kept(t, status_map) and is_failing(t, status_map)]
    observed = {t: observed_status(t, status_map) for t in (*fail_to_pass, *pass_to_pass)}
    return Verdicts(tuple(f2p_success), tuple(f2p_failure), tuple(p2p_success), tuple(p2p_failure), observed)


def _ratio(success: int, failure: int) -> float:
    total = success + failure
    return 1.0 if total == 0 else success / total


def resolution(report: Verdicts) -> ResolvedStatus:
    """Rule 4."""
    f2p = _ratio(len(report.fail_to_pass_success), len(report.fail_to_pass_failure))
    p2p = _ratio(len(report.pass_to_pass_success), len(report.pass_to_pass_failure))
    if f2p == 1 and p2p == 1:
        return ResolvedStatus.FULL
    if 0 < f2p < 1 and p2p == 1:
        return ResolvedStatus.PARTIAL
    return ResolvedStatus.NO


@dataclass(frozen=True, slots=True)
class Grade:
    resolved: bool
    status: ResolvedStatus
    # None when the run itself was broken (Rule 5): then `reason` says why
    tests: Verdicts | None
    reason: str | None = None


def failure_marker(log: str) -> str | None:
    """The reason a failure marker in ``log`` gives (Rule 5), if it carries one."""
    return next((reason for marker, reason in _FAILURE_MARKERS.items() if marker in log), None)


def test_exit_code(log: str) -> int | None:
    """The test command's exit status from the last ``>>>>> Test Exit Code: N`` line, if there is one."""
    codes = _TEST_EXIT_CODE.findall(log)
    return int(codes[-1]) if codes else None


def suite_ran(log: str) -> bool:
    """Rule 5c: whether ``log`` shows a runner's own non-zero count of tests run (5.0.2's ``SUITE_RAN``)."""
    return _SUITE_RAN.search(log) is not None


def exit_code_contradiction(log: str, status_map: Mapping[str, TestStatus]) -> str | None:
    """Rule 5b: why the exit code says the parsed log is not the real run, if it does."""
    code = test_exit_code(log)
    if code in (None, 0) or not status_map:
        return None
    if any(status in (TestStatus.FAILED, TestStatus.ERROR) for status in status_map.values()):
        return None
    return f"the test command exited {code} but the log reports no failing test"


def read_test_log(log: str, parser: LogParser) -> tuple[dict[str, TestStatus], str | None]:
    """Rules 5, 5c, 5b and 6 (5.0.2's order): the status map, or an empty map and why the run gives no verdict."""
    failed = failure_marker(log)
    if failed is not None:
        return {}, failed
    if START_TEST_OUTPUT not in log or END_TEST_OUTPUT not in log:
        return {}, "the test-output markers are missing"
    between = log.split(START_TEST_OUTPUT, 1)[1].split(END_TEST_OUTPUT, 1)[0]
    status_map = parser(between) or parser(log)
    if not status_map and not suite_ran(log):
        return {}, "the log reports no test, and nothing in it shows the test suite ran"
    contradiction = exit_code_contradiction(log, status_map)
    if contradiction is not None:
        return {}, contradiction
    return status_map, None


def grade_log(
    log: str,
    fail_to_pass: Sequence[str],
    pass_to_pass: Sequence[str],
    parser: LogParser,
    eval_type: EvalType = "pass_and_fail",
) -> Grade:
    """Grade one evaluation log exactly as SWE-bench does (``eval_type``: the row's, default SWE-bench's)."""
    status_map, reason = read_test_log(log, parser)
    if reason is not None:
        return Grade(False, ResolvedStatus.NO, None, reason)
    report = grade_tests(status_map, fail_to_pass, pass_to_pass, eval_type)
    status = resolution(report)
    return Grade(status is ResolvedStatus.FULL, status, report)


def unresolved(reason: str) -> Grade:
    """The grade of a run that never produced a test log (no patch, patch did not apply, timeout)."""
    return Grade(False, ResolvedStatus.NO, None, reason)
