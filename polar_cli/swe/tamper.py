"""Reward-hack defences: the candidate patch's changes to test infrastructure that the test patch does not own.

Evaluation resets the files the test patch touches before applying it (`evaluate` step 2), so whatever a patch does
to those is gone. Everything else it changes stays, and some of it decides what the tests report without touching
the code under test: a planted ``conftest.py`` hook can mark every failure passed, an ``addopts`` line can load
a plugin, a test helper can stop asserting. SWE-bench's grader is fooled by all of them; for RL that is a reward
hack, for SFT a poisoned corpus. This module finds such changes (`find_tampering`) and drops them from a patch
(`drop_files`); `evaluate.evaluate_instance` applies the mode (`screen_patch`):

- reject: a finding makes the attempt unresolved, reason ``tamper: <paths>``, except a test module's
  (``Finding.module``: a ``test_*.py`` / ``*_test.py`` / ``tests.py`` file, new or changed, not a runner file): agents
  write and update tests as part of honest work, so those are reverted (dropped, graded without them: the graded run
  sees their base version or nothing, which no hook can change) and the attempt is graded;
- revert: the offending files' sections are dropped from the patch, the rest is applied and graded;
- off: SWE-bench exact; the findings are still reported.

A path is test infrastructure (`path_rule`) when it is a ``conftest.py``, ``pytest.ini`` / ``.pytest.ini``,
``pytest.toml`` / ``.pytest.toml`` (pytest 9),
``sitecustomize.py`` / ``usercustomize.py``, a ``*.pth`` file, ``noxfile.py``, a file inside ``*.egg-info`` /
``*.dist-info`` (their ``entry_points.txt`` registers pytest plugins), the repository's test runner
(`RUNNER_FILES`, or the test command's own script such as Django's ``tests/runtests.py``), under a directory named
``test``, ``tests`` or ``testing``, or a ``test_*.py`` / ``*_test.py`` module, at any depth. In ``setup.cfg``,
``tox.ini`` and ``pyproject.toml`` only changes inside their test sections count (`is_test_section`): the section of
each changed line is read from the file's base content when the caller has it (`config_paths`), else from the
section headers the hunks show; a change whose section cannot be known counts, as does a rename of such a file.
"""

from __future__ import annotations

import functools
import posixpath
import re
import shlex
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from polar_cli.swe.diffs import FileDiff, Patch, hunks
from polar_cli.swe.repos import REPOS

TamperMode = Literal["reject", "revert", "off"]
TAMPER_MODES: tuple[TamperMode, ...] = ("reject", "revert", "off")

# files whose sections are checked one by one (at any depth: pytest reads the first it finds above its arguments)
SECTIONED = frozenset({"setup.cfg", "tox.ini", "pyproject.toml"})
TEST_DIRS = frozenset({"test", "tests", "testing"})
# each repository's runner and the files it reads, beyond what the test command names (`repos.REPOS`)
RUNNER_FILES: Mapping[str, tuple[str, ...]] = {
    "django/django": ("tests/runtests.py", "tests/test_sqlite.py"),
    "sympy/sympy": ("bin/test", "sympy/testing/runtests.py"),
}
_NAMED = {
    "conftest.py": "a pytest conftest.py: its hooks and fixtures run inside the test session",
    "pytest.ini": "pytest's configuration file",
    ".pytest.ini": "pytest's configuration file",
    "pytest.toml": "pytest's configuration file (pytest 9)",
    ".pytest.toml": "pytest's configuration file (pytest 9)",
    "sitecustomize.py": "imported at interpreter start-up",
    "usercustomize.py": "imported at interpreter start-up",
    "noxfile.py": "nox's test sessions",
}
_INI_HEADER = re.compile(r"^\[(?P<name>[^\]]+)\]")
_TOML_HEADER = re.compile(r"^\s*\[\[?(?P<name>[^\[\],=]+?)\]\]?\s*(?:#.*)?$")
_TOML_KEY = re.compile(r"^\s*(?P<key>[A-Za-z0-9_.\-\"' ]+?)\s*=")
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"^python[0-9.]*$")


@dataclass(frozen=True, slots=True)
class Finding:
    """One changed path that is test infrastructure, and why it counts; ``module``: it is a test module, which
    reject mode reverts instead of rejecting the attempt for (honest agents write tests)."""

    path: str
    why: str
    module: bool = False


@dataclass(frozen=True, slots=True)
class TamperCheck:
    """What the check found in a candidate patch under ``mode``, and which files' changes it dropped (revert)."""

    mode: TamperMode
    findings: tuple[Finding, ...] = ()
    reverted: tuple[str, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(f.path for f in self.findings))

    @property
    def rejected(self) -> bool:
        """Whether the attempt is unresolved for its tampering alone (mode reject, a finding other than a test
        module's)."""
        return self.mode == "reject" and any(not f.module for f in self.findings)

    def reason(self) -> str:
        return f"tamper: {', '.join(f.path for f in self.findings if not f.module or self.mode != 'reject')}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "rejected": self.rejected,
            "findings": [{"path": f.path, "why": f.why, "module": f.module} for f in self.findings],
            "reverted": list(self.reverted),
        }


@functools.lru_cache(maxsize=256)
def command_script(test_cmd: str) -> str | None:
    """The repository file a test command runs (``./tests/runtests.py``, ``bin/test``, ``python run.py``), if any.
    Cached: a run screens every session of an instance with the same command, and `shlex.split` was half the check."""
    try:
        words = [w for w in shlex.split(test_cmd) if not _ENV_ASSIGNMENT.match(w)]
    except ValueError:
        return None
    if words and _PYTHON.match(posixpath.basename(words[0])):
        rest, words = words[1:], []
        while rest:
            word = rest.pop(0)
            if word in ("-m", "-c"):
                return None  # a module or a command string, no file of the repository
            if word in ("-X", "-W"):
                rest = rest[1:]
            elif not word.startswith("-"):
                words = [word]
                break
    if not words or words[0].startswith("/"):
        return None
    script = words[0]
    if "/" not in script and not script.endswith(".py"):
        return None  # a program on PATH: pytest, tox
    return posixpath.normpath(script)


def runner_files(repo: str, test_cmd: str = "") -> frozenset[str]:
    """The repository's runner files: `RUNNER_FILES`, and the scripts its test command and ``test_cmd`` run."""
    spec = REPOS.get(repo)
    commands = [test_cmd, spec.test_cmd if spec else ""]
    scripts = {s for s in (command_script(c) for c in commands if c) if s}
    return frozenset({*RUNNER_FILES.get(repo, ()), *scripts})


def path_rule(path: str, runners: Collection[str] = ()) -> str | None:
    """Why ``path`` is test infrastructure by its name alone, or None (sectioned configs are judged by content)."""
    parts = path.split("/")
    name = parts[-1]
    if name in _NAMED:
        return _NAMED[name]
    if name.endswith(".pth"):
        return "a .pth file: its import lines run at interpreter start-up"
    if path in runners:
        return "the repository's test runner"
    if any(p.endswith((".egg-info", ".dist-info")) for p in parts[:-1]):
        return "installed package metadata: its entry points load pytest plugins"
    if any(p in TEST_DIRS for p in parts[:-1]):
        return "under a test directory"
    if name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")):
        return "a test module"
    return None


def is_test_section(kind: str, name: str) -> bool:
    """Whether section (or dotted key) ``name`` of a ``kind`` file configures the test run: pytest's and tox's.

    ini files (setup.cfg, tox.ini): ``[pytest]``, ``[tool:pytest]``, ``[tox]``, ``[tox:*]``, ``[testenv]``,
    ``[testenv:*]``; ``[coverage:*]``, ``[metadata]``, ``[flake8]``... are not. pyproject.toml: ``tool.pytest``,
    ``tool.tox`` and every table below them; ``project``, ``tool.coverage``... are not.
    """
    if kind == "pyproject.toml":
        return any(name == t or name.startswith(t + ".") for t in ("tool.pytest", "tool.tox"))
    return name in ("pytest", "tool:pytest", "tox", "testenv") or name.startswith(("tox:", "testenv:"))


def _header(kind: str, line: str) -> str | None:
    """The section a header line opens (TOML names without quotes and spaces), or None for any other line."""
    line = line.rstrip("\r")
    if kind == "pyproject.toml":
        match = _TOML_HEADER.match(line)
        return re.sub(r"[\s\"']", "", match.group("name")) if match else None
    match = _INI_HEADER.match(line)
    return match.group("name").strip() if match else None


def _effective(kind: str, section: str, line: str) -> str | None:
    """What a line configures: its section, or in pyproject's root and ``[tool]`` the dotted key it sets (None: a
    line there that sets no key, the middle of a multi-line value whose key is not known)."""
    if kind != "pyproject.toml" or section not in ("", "tool"):
        return section
    match = _TOML_KEY.match(line)
    if match is None:
        return section if line.lstrip().startswith("#") else None
    key = re.sub(r"[\s\"']", "", match.group("key"))
    return f"{section}.{key}" if section else key


@dataclass(frozen=True, slots=True)
class _Base:
    """A sectioned file's base content: the section each line is in (index 0: before line 1, the preamble) and
    which lines are headers."""

    sections: tuple[str, ...]
    headers: frozenset[int]

    @classmethod
    def read(cls, kind: str, source: str) -> _Base:
        lines = source.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        sections, headers = [""], set()
        for n, line in enumerate(lines, 1):
            name = _header(kind, line)
            if name is not None:
                headers.add(n)
            sections.append(name if name is not None else sections[-1])
        return cls(tuple(sections), frozenset(headers))

    @property
    def length(self) -> int:
        return len(self.sections) - 1

    def at(self, line: int) -> str:
        return self.sections[max(0, min(line, self.length))]

    def header_between(self, first: int, last: int) -> bool:
        return any(first <= n <= last for n in self.headers)


def section_rule(path: str, diff: FileDiff, source: str | None) -> str | None:
    """Why the changes to a sectioned config file touch the test run, or None.

    Two cursors walk the hunks: the section the old side is in and the one the new side is in. A changed line
    counts when its side's section is a test section; an unchanged line counts when the change moved it into or
    out of one (a header removed or added above it). Without ``source``, the section before a hunk that does not
    start at line 1 is unknown, and a change there counts.
    """
    kind = posixpath.basename(path)
    change = diff.change
    if change.old is not None and change.new is not None and change.old != change.new:
        return f"renames or copies {kind}"
    found = hunks(diff.text)
    if not found and ("GIT binary patch" in diff.text or "Binary files " in diff.text):
        return f"a binary change to {kind}"
    base = _Base.read(kind, source) if source is not None else None
    old_side: str | None = ""
    new_side: str | None = ""
    covered = 0  # the last old line the previous hunk covered

    def counts(section: str | None, line: str) -> bool:
        name = None if section is None else _effective(kind, section, line)
        return name is None or is_test_section(kind, name)

    def moved(line: str) -> bool:
        return old_side != new_side and (counts(old_side, line) or counts(new_side, line))

    for hunk in found:
        before = hunk.old_start - 1 if hunk.old_count > 0 else hunk.old_start
        if base is not None:
            # lines between hunks are on both sides: a header there puts both cursors in its section
            new_side = base.at(before) if base.header_between(covered + 1, before) else new_side
            old_side = base.at(before)
        elif before > covered:
            old_side = new_side = None
        for raw in hunk.lines:
            tag, line = raw[:1], raw[1:].rstrip("\r")
            header = _header(kind, line)
            if tag == "\\":
                continue
            if tag in (" ", ""):
                if header is not None:
                    old_side = new_side = header
                elif line.strip() and moved(line):
                    return f"moves lines of {kind} into or out of a test section"
                continue
            if tag == "-":
                old_side = header if header is not None else old_side
                side = old_side
            else:
                new_side = header if header is not None else new_side
                side = new_side
            if not line.strip():
                continue
            if side is None:
                return f"changes {kind} where its section is unknown (the base file was not read)"
            name = _effective(kind, side, line)
            if name is None:
                return f"changes the middle of a value in {kind}'s [{side or 'root'}] table"
            if is_test_section(kind, name):
                return f"changes {kind}'s test section [{name}]"
        covered = before + hunk.old_count
        follows = base is None or covered < base.length
        if follows and moved(""):
            return f"moves lines of {kind} into or out of a test section"
    return None


def config_paths(patch: str | Patch, test_patch: str | Patch) -> list[str]:
    """The sectioned config files the check reads the base content of: those the patch changes that the test
    patch does not own and no path rule already flags."""
    owned = set(Patch.of(test_patch).touched_paths())
    return [
        d.change.old
        for d in Patch.of(patch).files
        if d.change.old is not None
        and d.change.old not in owned
        and posixpath.basename(d.change.old) in SECTIONED
        and path_rule(d.change.old) is None
    ]


def find_tampering(
    patch: str | Patch,
    test_patch: str | Patch,
    *,
    repo: str = "",
    test_cmd: str = "",
    sources: Mapping[str, str] | None = None,
) -> tuple[Finding, ...]:
    """Every path ``patch`` changes that is test infrastructure and that ``test_patch`` does not touch.

    ``sources`` are base contents of sectioned config files (`config_paths`), keyed by path; one that is missing
    leaves the sections before its hunks unknown. Both names of a rename are checked.
    """
    owned = set(Patch.of(test_patch).touched_paths())
    runners = runner_files(repo, test_cmd)
    findings: dict[str, Finding] = {}
    for diff in Patch.of(patch).files:
        for path in dict.fromkeys(p for p in (diff.change.old, diff.change.new) if p is not None):
            if path in owned or path in findings:
                continue
            why = path_rule(path, runners)
            if why is None and posixpath.basename(path) in SECTIONED:
                base = (sources or {}).get(diff.change.old) if diff.change.old is not None else ""
                why = section_rule(path, diff, base)
            if why is not None:
                findings[path] = Finding(path, why, is_test_module(path) and path not in runners)
    return tuple(findings.values())


def is_test_module(path: str) -> bool:
    """A module of tests by its name (pytest's and unittest's conventions, Django's ``tests.py``), not a helper,
    package ``__init__.py`` or conftest the graded tests import."""
    name = posixpath.basename(path)
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py") or name == "tests.py")


def drop_files(patch: str | Patch, paths: Collection[str]) -> str:
    """``patch`` without the sections of the files named in ``paths`` (either name of a rename); every other
    section, and the text before the first, stays byte for byte."""
    return Patch.of(patch).without(paths).text


def screen_patch(
    patch: str | Patch,
    test_patch: str | Patch,
    mode: TamperMode,
    *,
    repo: str = "",
    test_cmd: str = "",
    sources: Mapping[str, str] | None = None,
) -> tuple[Patch, TamperCheck]:
    """The patch to apply under ``mode`` (revert: without the offending files; its ``text`` is what to apply) and the
    check's record. Given a parsed patch, as a session holds one, it parses nothing again."""
    patch = Patch.of(patch)
    findings = find_tampering(patch, test_patch, repo=repo, test_cmd=test_cmd, sources=sources)
    dropped = [f for f in findings if mode == "revert" or (mode == "reject" and f.module)]
    if not dropped:
        return patch, TamperCheck(mode, findings)
    check = TamperCheck(mode, findings, tuple(dict.fromkeys(f.path for f in dropped)))
    if check.rejected:
        return patch, check
    return patch.without(check.reverted), check
