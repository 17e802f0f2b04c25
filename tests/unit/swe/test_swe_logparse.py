"""Log parsers against real runner output (tests/unit/swe/data: produced by running data/outcomes_src.py and
data/units_src.py under pytest 9.2 on the host and pytest 7.2.1 in the demo image)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from polar_cli.errors import ConfigError
from polar_cli.swe.logparse import (
    TestStatus,
    _summary_node_id,
    parse_log_django,
    parse_log_pytest,
    parse_log_pytest_ansi,
    parse_log_pytest_options,
    parse_log_sympy,
    parse_log_unittest,
    parser_for,
)

DATA = Path(__file__).parent / "data"
M = "tests/test_outcomes.py::"
P, F, S, E, X = TestStatus.PASSED, TestStatus.FAILED, TestStatus.SKIPPED, TestStatus.ERROR, TestStatus.XFAIL

# what -rA reports for every test of outcomes_src.py, by full node id
SUMMARY = {
    f"{M}test_passes": P,
    f"{M}test_params[Hello World-hello-world]": P,
    f"{M}test_params[[draft] notes-draft-notes]": P,
    f"{M}test_params[Cr\\xe8me br\\xfbl\\xe9e-creme-brulee]": P,
    f"{M}test_params[-]": P,
    f"{M}TestGroup::test_method": P,
    f"{M}TestGroup::test_param_method[1]": P,
    f"{M}test_prints_status_words": P,
    f"{M}test_xfail": X,
    f"{M}test_setup_error": E,
    f"{M}test_fails": F,
    f"{M}test_params[a - b-a-b]": F,
    f"{M}TestGroup::test_param_method[2]": F,
}
# SWE-bench keys an id with spaces by its first word; datasets built with its parser name tests that way
FIRST_WORD_KEYS = {
    f"{M}test_params[Hello": P,
    f"{M}test_params[[draft]": P,
    f"{M}test_params[Cr\\xe8me": P,
    f"{M}test_params[a": F,
}


def read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("log", ["pytest9_rA.log", "pytest7_rA.log"])
def test_summary_lines_give_every_reported_test(log: str) -> None:
    assert parse_log_pytest(read(log)) == {**SUMMARY, **FIRST_WORD_KEYS}


@pytest.mark.parametrize("log", ["pytest9_rA.log", "pytest7_rA.log", "pytest9_rA_v.log", "pytest7_rA_v.log"])
def test_xpass_and_grouped_skips_name_no_test(log: str) -> None:
    statuses = parse_log_pytest(read(log))
    assert f"{M}test_xpass" not in statuses  # SWE-bench has no XPASS status: the test counts as absent
    assert not any(key.startswith("[") for key in statuses)  # "SKIPPED [1] file:line: reason"


@pytest.mark.parametrize("log", ["pytest9_rA_v.log", "pytest7_rA_v.log"])
def test_verbose_lines_add_skipped_tests(log: str) -> None:
    statuses = parse_log_pytest(read(log))
    assert statuses[f"{M}test_skipped"] is S
    for test, status in SUMMARY.items():
        assert statuses[test] is status, test


@pytest.mark.parametrize("log", ["pytest9_rA_tb.log", "pytest7_rA_tb.log"])
def test_tracebacks_and_captured_output_do_not_change_real_tests(log: str) -> None:
    statuses = parse_log_pytest(read(log))
    for test, status in SUMMARY.items():
        assert statuses[test] is status, test
    # captured stdout that starts with a status word is read as SWE-bench reads it: a junk key, harmless
    assert statuses["something"] is P


def test_colour_codes_are_stripped_by_the_ansi_parser() -> None:
    log = read("pytest9_rA_color.log")
    assert "\x1b[" in log
    # SWE-bench 5.0.2's pytest_v2 keys: whole ids, and only FAILED lines lose their " - message" (before the split,
    # so a FAILED id holding " - " is cut there)
    v2_keys = {
        **{test: status for test, status in SUMMARY.items() if status is not F},
        f"{M}test_xfail - known bug": TestStatus.XFAIL,
        f"{M}test_setup_error - RuntimeError: fixture exploded": TestStatus.ERROR,
        f"{M}test_fails": F,
        f"{M}test_params[a": F,
        f"{M}TestGroup::test_param_method[2]": F,
    }
    del v2_keys[f"{M}test_xfail"], v2_keys[f"{M}test_setup_error"]
    assert parse_log_pytest_ansi(log) == v2_keys
    assert f"{M}test_passes" not in parse_log_pytest(log)


def test_last_report_of_a_test_wins() -> None:
    log = "t.py::test_a FAILED [ 50%]\nPASSED t.py::test_a\n"
    assert parse_log_pytest(log) == {"t.py::test_a": P}


def test_windows_line_endings() -> None:
    assert parse_log_pytest("PASSED t.py::test_a\r\nFAILED t.py::test_b[x y] - boom\r\n") == {
        "t.py::test_a": P,
        "t.py::test_b[x y]": F,
        "t.py::test_b[x": F,
    }


def test_message_after_a_bracketed_id_with_brackets_in_it() -> None:
    line = "FAILED t.py::test_x[[1, 2] - [3]] - AssertionError: [1] - 2"
    assert parse_log_pytest(line)["t.py::test_x[[1, 2] - [3]]"] is F


def test_line_without_a_test_is_ignored() -> None:
    assert parse_log_pytest("===== 3 passed in 0.1s =====\nPASSED\n\n") == {}


def test_option_parser_keeps_only_the_last_path_component() -> None:
    log = "PASSED tests/t.py::test_open[/tmp/pytest-of-root/pytest-3/data.bin]\nPASSED tests/t.py::test_plain\n"
    assert parse_log_pytest_options(log) == {"tests/t.py::test_open[/data.bin]": P, "tests/t.py::test_plain": P}


def test_unittest_verbose_output() -> None:
    case = "(test_units.Arithmetic.{})"
    statuses = parse_log_unittest(read("unittest_v.log"))
    assert statuses == {
        f"test_error {case.format('test_error')}": E,
        f"test_expected_failure {case.format('test_expected_failure')}": X,
        f"test_fail {case.format('test_fail')}": F,
        f"test_noisy {case.format('test_noisy')}": P,  # its "ok" came on the line after its output
        f"test_ok {case.format('test_ok')}": P,
        f"test_skipped {case.format('test_skipped')}": S,
    }


def test_parser_registry_by_repo_and_name() -> None:
    assert parser_for("getmoto/moto") is parse_log_pytest
    assert parser_for("django/django") is parse_log_django
    assert parser_for("sympy/sympy") is parse_log_sympy
    assert parser_for("o/unknown") is parse_log_pytest
    assert parser_for("psf/requests") is parse_log_pytest_options
    assert parser_for("getmoto/moto", "pytest_ansi") is parse_log_pytest_ansi
    with pytest.raises(ConfigError, match="log parser 'nose': unknown"):
        parser_for("x/y", "nose")


def test_swebench_parser_names_pick_ours_and_unsupported_ones_are_errors() -> None:
    assert parser_for("getmoto/moto", "parse_log_django") is parse_log_django  # the row's name beats the repo's
    assert parser_for("o/unknown", "parse_log_scikit") is parse_log_pytest_ansi
    assert parser_for("o/unknown", "parse_log_requests") is parse_log_pytest_options
    with pytest.raises(ConfigError, match="Polar has no parser for this test runner"):
        parser_for("getmoto/moto", "parse_log_gotest")  # never pytest's parser in its place


def test_parameter_with_a_stray_bracket() -> None:
    assert parse_log_pytest("FAILED t.py::test_x[a[] - boom")["t.py::test_x[a[]"] is F
    assert parse_log_pytest("PASSED t.py::test_x[b] c]")["t.py::test_x[b] c]"] is P


def _node_id_by_characters(rest: str) -> str:
    """`_summary_node_id` as it was written first, character by character: the reference its faster form must match."""
    first = rest.split(maxsplit=1)[0]
    if "[" not in first:
        return first
    text = rest.rstrip()
    start = text.index("[")
    ends = [
        i + 1
        for i in range(start, len(text))
        if text[i] == "]" and (i + 1 == len(text) or text[i + 1 :].startswith(" - "))
    ]
    if not ends:
        return first
    depth = 0
    for i in range(start, len(text)):
        depth += {"[": 1, "]": -1}.get(text[i], 0)
        if depth == 0 and i + 1 in ends:
            return text[: i + 1]
    return text[: ends[0]]


def test_summary_node_ids_match_the_character_by_character_reference() -> None:
    rng = random.Random(27)
    for _ in range(20_000):
        rest = "t.py::x[" + "".join(rng.choice("[]- ab") for _ in range(rng.randrange(0, 14)))
        assert _summary_node_id(rest) == _node_id_by_characters(rest), rest
