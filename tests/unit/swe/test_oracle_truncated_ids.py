"""SWE-bench 5.0.2 as the oracle for truncated parametrised ids (issue 23 #8).

Datasets built with first-word parsers name ``test_x[log(photon cm)]`` as ``test_x[log(photon``. 5.0.2's pytest_v2
parsers (astropy, scikit-learn, sphinx, pytest_v2) key whole ids, and its grading finds a truncated id by prefix only
when every expansion agrees on pass-or-fail. Polar once kept a first-word key whose status was the last expansion's:
RESOLVED_FULL where 5.0.2 says RESOLVED_NO.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from swebench.harness.grading import get_eval_report

from polar_cli.swe import grading
from polar_cli.swe.grading import grade_log
from polar_cli.swe.logparse import parser_for

V2_PARSERS = ("parse_log_astropy", "parse_log_scikit", "parse_log_sphinx", "parse_log_pytest_v2")
M = "astropy/units/tests/test_format.py::"
G, R, Y, B, Z = "\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[1m", "\x1b[0m"


def summary(*lines: tuple[str, str]) -> str:
    colour = {"PASSED": G, "FAILED": R, "ERROR": R}
    return "\n".join(f"{colour.get(s, Y)}{s}{Z} {M}{B}{t}{Z}" for s, t in lines)


LOGS = {
    # the case of the issue: the expansions disagree, the last one passes
    "disagree, last passes": summary(
        ("FAILED", "test_ogip_grammar_fail[log(photon /cm)]"),
        ("PASSED", "test_ogip_grammar_fail[log(photon cm)]"),
        ("PASSED", "test_keep"),
    ),
    "disagree, last fails": summary(
        ("PASSED", "test_ogip_grammar_fail[log(photon cm)]"),
        ("FAILED", "test_ogip_grammar_fail[log(photon /cm)]"),
        ("PASSED", "test_keep"),
    ),
    "agree": summary(
        ("PASSED", "test_ogip_grammar_fail[log(photon cm)]"),
        ("XFAIL", "test_ogip_grammar_fail[log(photon /cm)]"),
        ("PASSED", "test_keep"),
    ),
    "agree, skipped keeps": summary(
        ("SKIPPED", "test_ogip_grammar_fail[log(photon cm)]"),
        ("PASSED", "test_keep[a b]"),
        ("PASSED", "test_keep"),
    ),
    "exact id present": summary(
        ("FAILED", "test_ogip_grammar_fail[log(photon"),
        ("PASSED", "test_ogip_grammar_fail[log(photon cm)]"),
        ("PASSED", "test_keep"),
    ),
    "an error expansion": summary(
        ("ERROR", "test_ogip_grammar_fail[log(photon cm)] - RuntimeError: boom"),
        ("PASSED", "test_ogip_grammar_fail[log(photon /cm)]"),
        ("PASSED", "test_keep"),
    ),
    "plain -v progress lines": "\n".join(
        (
            f"{M}test_ogip_grammar_fail[log(photon /cm)] FAILED",
            f"{M}test_ogip_grammar_fail[log(photon cm)] PASSED",
            f"{M}test_keep PASSED",
        )
    ),
    "FAILED with a message holding ' - '": summary(
        ("PASSED", "test_ogip_grammar_fail[log(photon cm)]"),
        ("FAILED", "test_ogip_grammar_fail[log(photon - cm)] - AssertionError"),
        ("PASSED", "test_keep"),
    ),
}
TESTS = {
    "truncated": ([f"{M}test_ogip_grammar_fail[log(photon"], [f"{M}test_keep"]),
    "truncated, in PASS_TO_PASS": ([f"{M}test_keep"], [f"{M}test_ogip_grammar_fail[log(photon"]),
    "balanced ids are exact": ([f"{M}test_ogip_grammar_fail[log"], [f"{M}test_keep[a"]),
}


@pytest.mark.parametrize("tests", sorted(TESTS))
@pytest.mark.parametrize("log_name", sorted(LOGS))
@pytest.mark.parametrize("log_parser", V2_PARSERS)
def test_truncated_ids_grade_as_swebench_502(log_parser: str, log_name: str, tests: str, tmp_path: Path) -> None:
    f2p, p2p = TESTS[tests]
    log = f"{grading.START_TEST_OUTPUT}\n{LOGS[log_name]}\n{grading.END_TEST_OUTPUT}\n{grading.TEST_EXIT_CODE}: 1\n"
    path = tmp_path / "test_output.txt"
    path.write_text(log)
    spec = SimpleNamespace(
        instance_id="i", FAIL_TO_PASS=f2p, PASS_TO_PASS=p2p, log_parser=log_parser, eval_type="pass_and_fail"
    )
    pred = {"instance_id": "i", "model_patch": "x", "model_name_or_path": "m"}
    report = get_eval_report(spec, pred, str(path), True)["i"]  # type: ignore[arg-type]
    ours = grade_log(log, f2p, p2p, parser_for("o/r", log_parser))
    assert ours.resolved is report["resolved"]
    assert (ours.tests is not None) is report["patch_successfully_applied"]
    if ours.tests is not None:
        assert ours.tests.to_swebench() == report["tests_status"]


@pytest.mark.parametrize("log_parser", V2_PARSERS)
def test_the_issue_case_is_unresolved(log_parser: str) -> None:
    log = f"{grading.START_TEST_OUTPUT}\n{LOGS['disagree, last passes']}\n{grading.END_TEST_OUTPUT}\n"
    f2p, p2p = TESTS["truncated"]
    grade = grade_log(log, f2p, p2p, parser_for("astropy/astropy", log_parser))
    assert grade.status is grading.ResolvedStatus.NO and grade.tests is not None
    assert grade.tests.observed[f2p[0]] is None  # ambiguous: absent, as in 5.0.2
