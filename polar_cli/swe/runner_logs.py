"""Parsers for the runners that are not pytest -rA: Django's, sympy's ``bin/test``, and SWE-bench's seaborn variant.

Each reproduces the map SWE-bench 5.0.2's parser of the same name builds, quirks included, because the datasets'
FAIL_TO_PASS / PASS_TO_PASS ids were written by those parsers (tests/unit/swe/test_oracle_parsers.py compares them).
"""

from __future__ import annotations

import re

from polar_cli.swe.status import TestStatus

# Django's runner at --verbosity 2: "test_x (pkg.mod.Case) ... ok", then "FAIL: test_x (pkg.mod.Case)" headers.
_DJANGO_PASS_SUFFIXES = (" ... ok", " ... OK", " ...  OK")
_DJANGO_VERSION_TEST = "--version is equivalent to version"
# django__django-7188 prints a migration line and the test's name on one line
_DJANGO_MIGRATION_PREFIX = "Applying sites.0002_alter_domain_unique...test_no_migrations"
# A long multi-line print lands between "..." and the result; the "ok" then starts a line of its own.
_DJANGO_INTERRUPTED = tuple(
    re.compile(pattern, re.MULTILINE)
    for pattern in (
        r"^(.*?)\s\.\.\.\sTesting against Django installed in (?s:.*?) silenced\)\.\nok$",
        r"^(.*?)\s\.\.\.\sInternal Server Error: /(?:.*)/\nok$",
        r"^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$",
    )
)
_DJANGO_HEADERS = {"FAIL:": TestStatus.FAILED, "ERROR:": TestStatus.ERROR}


def parse_log_django(log: str) -> dict[str, TestStatus]:
    """Django ``runtests.py --verbosity 2``. A FAIL:/ERROR: header is keyed by its first word (the method name)."""
    status_map: dict[str, TestStatus] = {}
    previous: str | None = None  # the last test whose line held " ... ": an "ok" on a later line is its result
    for raw in log.split("\n"):
        line = raw.strip()
        if _DJANGO_VERSION_TEST in line:
            status_map[_DJANGO_VERSION_TEST] = TestStatus.PASSED
        if " ... " in line:
            previous = line.split(" ... ")[0]
        suffix = next((s for s in _DJANGO_PASS_SUFFIXES if line.endswith(s)), None)
        if suffix is not None:
            if line.startswith(_DJANGO_MIGRATION_PREFIX):
                line = line.split("...", 1)[-1].strip()
            status_map[line.rsplit(suffix, 1)[0]] = TestStatus.PASSED
        if " ... skipped" in line:
            status_map[line.split(" ... skipped")[0]] = TestStatus.SKIPPED
        for word, status in (("FAIL", TestStatus.FAILED), ("ERROR", TestStatus.ERROR)):
            if line.endswith(f" ... {word}"):
                status_map[line.split(f" ... {word}")[0]] = status
        for header, status in _DJANGO_HEADERS.items():
            words = line.split()
            if line.startswith(header) and len(words) > 1:
                status_map[words[1]] = status
        if line.startswith("ok") and previous is not None:
            status_map[previous] = TestStatus.PASSED
    for pattern in _DJANGO_INTERRUPTED:
        for match in pattern.finditer(log):
            status_map[match.group(1)] = TestStatus.PASSED
    return status_map


# sympy's bin/test --verbose: one "test_name ok|F|E" line per test, then "____ path.py:test_name ____" per failure
_SYMPY_FAILURE = re.compile(r"_* (.*)\.py:(.*) _*")
_SYMPY_RESULTS = ((" E", TestStatus.ERROR), (" F", TestStatus.FAILED), (" ok", TestStatus.PASSED))


def parse_log_sympy(log: str) -> dict[str, TestStatus]:
    """sympy ``bin/test -C --verbose``: failure headers give "path.py:test" FAILED, result lines the bare name."""
    status_map = {f"{m.group(1)}.py:{m.group(2)}": TestStatus.FAILED for m in _SYMPY_FAILURE.finditer(log)}
    for raw in log.split("\n"):
        line = raw.strip()
        if not line.startswith("test_"):
            continue
        for suffix, status in _SYMPY_RESULTS:
            if line.endswith(suffix):
                status_map[line.split()[0]] = status
    return status_map


def parse_log_seaborn(log: str) -> dict[str, TestStatus]:
    """SWE-bench's seaborn parser: only PASSED and FAILED, from summary lines and ``-v`` progress lines."""
    status_map: dict[str, TestStatus] = {}
    for line in log.split("\n"):
        parts = line.split()
        if len(parts) < 2:
            continue
        if line.startswith("FAILED"):
            status_map[parts[1]] = TestStatus.FAILED
        elif " PASSED " in line:
            if parts[1] == "PASSED":
                status_map[parts[0]] = TestStatus.PASSED
        elif line.startswith("PASSED"):
            status_map[parts[1]] = TestStatus.PASSED
    return status_map
