"""Test logs to per-test statuses, one parser per test runner, chosen per repository as SWE-bench does.

A parser takes the test output (the text between the eval markers) and returns ``{test id: TestStatus}``. Only
SWE-bench's five statuses exist: a test pytest reports as XPASS is left out, so grading counts it as absent (failed),
exactly as SWE-bench's parsers do. When a test appears on several lines (``-v`` progress line, then the ``-rA``
summary), the last line wins.

pytest ids may contain spaces (``test_slug[Hello World-hello-world]``) and brackets (``test_x[[draft] notes]``).
SWE-bench's parser keys a test by the first whitespace-separated word after the status, so its datasets name such a
test ``test_slug[Hello``. We record both the full id and that first-word key, so manifests written either way grade
the same as under SWE-bench. Neither key can shadow another test: a first-word key never contains a space. The one
exception is `parse_log_pytest_ansi`, SWE-bench 5.0.2's pytest_v2 key for key: it keys whole ids only, and a
truncated id is found by grading's prefix rule (`grading.resolve_case`), as in 5.0.2.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from polar_cli.errors import ConfigError
from polar_cli.swe.repos import REPOS
from polar_cli.swe.runner_logs import parse_log_django, parse_log_seaborn, parse_log_sympy
from polar_cli.swe.status import TestStatus as TestStatus

LogParser = Callable[[str], dict[str, TestStatus]]

_STATUS = "|".join(s.value for s in TestStatus)
_STATUS_VALUES = frozenset(s.value for s in TestStatus)
_STATUS_FIRST = re.compile(rf"^({_STATUS})\s+(\S.*)$")
_TEST_FIRST = re.compile(rf"^(\S+)\s+({_STATUS})(?:\s|$)")
# a `-v` progress line whose id holds spaces: "path::test[a b] PASSED    [ 50%]"
_SPACED_TEST_FIRST = re.compile(rf"^(\S+::\S*\[.*?\])\s+({_STATUS})(?:\s|$)")
# "SKIPPED [3] tests/x.py:12: reason" groups skips by location; it names no test
_SKIP_GROUP = re.compile(r"^\[\d+\]")
_MESSAGE_SEP = " - "
_BRACKET = re.compile(r"[\[\]]")
_CLOSE = re.compile(r"\]")


def _summary_node_id(rest: str) -> str:
    """The node id at the start of a `-rA` summary line's remainder ("id" or "id - message")."""
    first = rest.split(maxsplit=1)[0]
    if "[" not in first:
        return first
    # A parametrised id may hold spaces and even " - ". pytest prints "<id>" or "<id> - <message>", so the id ends
    # at a "]" that ends the line or is followed by the separator: the one closing the id's first "[" when the
    # brackets balance, else (a parameter with a stray bracket) the first such "]".
    text = rest.rstrip()
    start = text.index("[")
    ends = {
        m.end() for m in _CLOSE.finditer(text, start) if m.end() == len(text) or text.startswith(_MESSAGE_SEP, m.end())
    }
    if not ends:
        return first
    depth = 0
    for bracket in _BRACKET.finditer(text, start):  # depth only changes, and an id only ends, at a bracket
        depth += 1 if bracket.group() == "[" else -1
        if depth == 0 and bracket.end() in ends:
            return text[: bracket.end()]
    return text[: min(ends)]


def _parse_pytest_line(line: str, status_map: dict[str, TestStatus]) -> None:
    status_first = _STATUS_FIRST.match(line)
    if status_first:
        status, rest = TestStatus(status_first.group(1)), status_first.group(2)
        if status is TestStatus.SKIPPED and _SKIP_GROUP.match(rest):
            return
        test_id = _summary_node_id(rest)
        status_map[test_id] = status
        status_map[rest.split(maxsplit=1)[0]] = status  # SWE-bench's key for this line (the same id unless spaced)
        return
    spaced = _SPACED_TEST_FIRST.match(line)
    if spaced and " " in spaced.group(1):
        status_map[spaced.group(1)] = TestStatus(spaced.group(2))
        return
    test_first = _TEST_FIRST.match(line)
    if test_first:
        status_map[test_first.group(1)] = TestStatus(test_first.group(2))


def parse_log_pytest(log: str) -> dict[str, TestStatus]:
    """pytest run with ``-rA`` (summary lines) and/or ``-v`` (progress lines)."""
    status_map: dict[str, TestStatus] = {}
    for raw in log.split("\n"):
        _parse_pytest_line(raw.rstrip("\r"), status_map)
    return status_map


_V2_COLOUR = re.compile(r"\[(\d+)m")
_V2_CONTROL = str.maketrans("", "", "".join(chr(c) for c in range(1, 32)))


def _v2_entry(line: str) -> tuple[str, TestStatus] | None:
    """SWE-bench 5.0.2's ``parse_log_pytest_v2`` key for one cleaned line: the whole id, spaces and all."""
    words = line.split()
    if any(line.startswith(status) for status in _STATUS_VALUES):
        if line.startswith(TestStatus.FAILED):
            words = line.split(_MESSAGE_SEP, 1)[0].split()
        if len(words) < 2 or words[0] not in _STATUS_VALUES:
            return None  # "PASSEDx y": 5.0.2 keeps a status no grading rule passes; absent grades the same
        if words[0] == TestStatus.SKIPPED and _SKIP_GROUP.fullmatch(words[1]):
            return None
        return " ".join(words[1:]), TestStatus(words[0])
    if any(line.endswith(status) for status in _STATUS_VALUES) and len(words) >= 2 and words[-1] in _STATUS_VALUES:
        return " ".join(words[:-1]), TestStatus(words[-1])  # a classic `-vv` progress line: "path::test PASSED"
    return None


def parse_log_pytest_ansi(log: str) -> dict[str, TestStatus]:
    """SWE-bench 5.0.2's ``parse_log_pytest_v2`` (astropy, scikit-learn, sphinx), key for key.

    Its keys are whole ids, never first-word ones: a manifest id cut at a space (``test_x[a``) is then found only by
    grading's prefix rule (`grading.resolve_case`), which refuses it when the expansions disagree. Colour codes go
    as 5.0.2 strips them (``[<digits>m``, then every control character), so ``[1;31m`` residue stays in a key there
    and here alike.
    """
    status_map: dict[str, TestStatus] = {}
    for raw in log.split("\n"):
        entry = _v2_entry(_V2_COLOUR.sub("", raw).translate(_V2_CONTROL))
        if entry is not None:
            status_map[entry[0]] = entry[1]
    return status_map


def parse_log_matplotlib(log: str) -> dict[str, TestStatus]:
    """pytest, with matplotlib's ``MouseButton`` enum in ids written as SWE-bench writes them (1 and 3)."""
    return parse_log_pytest(log.replace("MouseButton.LEFT", "1").replace("MouseButton.RIGHT", "3"))


_OPTION = re.compile(r"^(.*?)\[(.*)\]$")


def _normalise_option_id(test_id: str) -> str:
    # ids parametrised by absolute paths carry a temp dir that differs per run: keep only the last component
    match = _OPTION.match(test_id)
    if match is None:
        return test_id
    base, option = match.groups()
    if option.startswith("/") and not option.startswith("//") and "*" not in option:
        option = "/" + option.split("/")[-1]
    return f"{base}[{option}]"


def parse_log_pytest_options(log: str) -> dict[str, TestStatus]:
    """pytest output whose parameter ids contain absolute paths (requests, pylint, pydicom in SWE-bench)."""
    return {_normalise_option_id(test_id): status for test_id, status in parse_log_pytest(log).items()}


_UNITTEST_LINE = re.compile(r"^(?P<test>\S.*?) \.\.\. (?P<outcome>.*)$")
_UNITTEST_HEADER = re.compile(r"^(?P<kind>FAIL|ERROR): (?P<test>.+)$")


def _unittest_outcome(outcome: str) -> TestStatus | None:
    outcome = outcome.strip()
    if outcome in ("ok", "OK"):
        return TestStatus.PASSED
    if outcome.startswith("skipped"):
        return TestStatus.SKIPPED
    if outcome == "FAIL":
        return TestStatus.FAILED
    if outcome == "ERROR":
        return TestStatus.ERROR
    if outcome == "expected failure":
        return TestStatus.XFAIL
    return None  # "unexpected success" and output interleaved with the result


def parse_log_unittest(log: str) -> dict[str, TestStatus]:
    """unittest / Django runner with ``-v 2``: "test_x (pkg.mod.Case) ... ok" and "FAIL: test_x (...)" headers."""
    status_map: dict[str, TestStatus] = {}
    pending: str | None = None
    for raw in log.split("\n"):
        line = raw.rstrip("\r").strip()
        header = _UNITTEST_HEADER.match(line)
        if header:
            kind = TestStatus.FAILED if header.group("kind") == "FAIL" else TestStatus.ERROR
            status_map[header.group("test")] = kind
            continue
        result = _UNITTEST_LINE.match(line)
        if result:
            pending = result.group("test")
            status = _unittest_outcome(result.group("outcome"))
            if status is not None:
                status_map[pending] = status
                pending = None
        elif pending is not None and line in ("ok", "OK"):
            # the test wrote output between "..." and its result: the result lands on a line of its own
            status_map[pending] = TestStatus.PASSED
            pending = None
    return status_map


PARSERS: Mapping[str, LogParser] = {
    "django": parse_log_django,
    "matplotlib": parse_log_matplotlib,
    "pytest": parse_log_pytest,
    "pytest_ansi": parse_log_pytest_ansi,
    "pytest_options": parse_log_pytest_options,
    "seaborn": parse_log_seaborn,
    "sympy": parse_log_sympy,
    "unittest": parse_log_unittest,
}

# The parser SWE-bench uses per repository (`repos.REPOS`); a repository not listed is graded with "pytest".
REPO_PARSERS: Mapping[str, str] = {repo: spec.parser for repo, spec in REPOS.items()}

# swebench 5.0.2's PARSER_REGISTRY names (what a SWE-bench 5 row's ``log_parser`` holds) that ours reproduce: each
# gives that parser's map on the same log (tests/unit/swe/test_oracle_parsers.py), plus the keys `PARSERS` adds.
_SWEBENCH_ALIASES: Mapping[str, tuple[str, ...]] = {
    "pytest": ("astroid", "flask", "marshmallow", "pvlib", "pytest", "pyvista", "sqlfluff", "xarray"),
    "pytest_options": ("pydicom", "pylint", "pytest_options", "requests"),
    "pytest_ansi": ("astropy", "pytest_v2", "scikit", "sphinx"),
    "django": ("django",),
    "matplotlib": ("matplotlib",),
    "seaborn": ("seaborn",),
    "sympy": ("sympy",),
}
SWEBENCH_PARSERS: Mapping[str, str] = {
    f"parse_log_{alias}": ours for ours, aliases in _SWEBENCH_ALIASES.items() for alias in aliases
}
# the rest of PARSER_REGISTRY: JavaScript, C, Go, Java, PHP, Ruby and Rust runners, which Polar cannot parse
SWEBENCH_UNSUPPORTED = frozenset(
    f"parse_log_{name}"
    for name in (
        *("bpmn_js", "calypso", "carbon", "chart_js", "eslint", "grommet", "highlightjs", "immutable_js", "jest"),
        *("jest_json", "karma", "lighthouse", "marked", "next", "openlayers", "p5js", "prismjs", "quarto_cli"),
        *("react_pdf", "tap", "vitest"),
        *("doctest", "googletest", "jq", "micropython_test", "redis", "gotest", "ant", "gradle_custom", "maven"),
        *("phpunit", "cucumber", "jekyll", "minitest", "rspec_transformed_json", "ruby_unit", "cargo"),
    )
)


def known_parser(name: str) -> bool:
    """Whether ``name`` names a parser: ours, or any of swebench 5.0.2's (supported here or not)."""
    return name in PARSERS or name in SWEBENCH_PARSERS or name in SWEBENCH_UNSUPPORTED


def parser_for(repo: str, name: str | None = None) -> LogParser:
    """The parser named ``name`` (ours or swebench's), else the one registered for ``repo``, else pytest's.

    A swebench name Polar has no parser for is an error, never a fallback: another runner's log read as pytest's
    would grade every test absent (or, under fail_only, every test passing).
    """
    if name in SWEBENCH_UNSUPPORTED:
        raise ConfigError(
            f"log parser {name!r} (swebench's): Polar has no parser for this test runner; "
            f"supported: {', '.join(sorted(SWEBENCH_PARSERS))} and {', '.join(sorted(PARSERS))}"
        )
    key = SWEBENCH_PARSERS.get(name or "", name) or REPO_PARSERS.get(repo, "pytest")
    try:
        return PARSERS[key]
    except KeyError:
        raise ConfigError(f"log parser {key!r}: unknown; known: {', '.join(sorted(PARSERS))}") from None
