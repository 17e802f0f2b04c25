"""Regenerate recipes/demo/instances.jsonl from the demo sources.

Layout:
    repos/<repo>/                         the repository at its base commit (committed by make_history.sh)
    instances/<instance_id>/problem.md    the issue text
    instances/<instance_id>/gold/<path>   files as the fix leaves them   -> `patch`
    instances/<instance_id>/test/<path>   files as the test change leaves them -> `test_patch`

FAIL_TO_PASS and PASS_TO_PASS are found the way SWE-bench's validation finds them: run the tests touched by the
test patch on base + test patch, then on base + gold + test patch; FAIL_TO_PASS failed before and pass after,
PASS_TO_PASS pass both times. Run from the repository root:

    .venv/bin/python recipes/demo/make_instances.py           # rewrite instances.jsonl
    .venv/bin/python recipes/demo/make_instances.py --check   # exit 1 if it is out of date
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from polar_cli.swe.diffs import runner_targets
from polar_cli.swe.grading import is_failing, is_passing
from polar_cli.swe.logparse import TestStatus, parse_log_pytest

HERE = Path(__file__).resolve().parent
OWNER = "polar-demo"
VERSIONS = {"textkit": "0.3", "csvsift": "1.2", "timespan": "0.8"}
TEST_CMD = "python3 -m pytest -rA --tb=no -p no:cacheprovider"
_GIT_ENV = {"GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **_GIT_ENV}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


@contextmanager
def base_checkout(repo_name: str) -> Iterator[tuple[Path, str]]:
    """A temporary copy of ``repos/<repo_name>`` committed exactly as the image build commits it."""
    with tempfile.TemporaryDirectory(prefix=f"polar-demo-{repo_name}-") as tmp:
        work = Path(tmp) / repo_name
        shutil.copytree(HERE / "repos" / repo_name, work, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        out = subprocess.run(
            ["sh", str(HERE / "make_history.sh"), repo_name], cwd=work, check=True, capture_output=True, text=True
        )
        yield work, out.stdout.strip()


def _reset(work: Path) -> None:
    _git(work, "reset", "-q", "--hard", "HEAD")
    _git(work, "clean", "-q", "-fdx")


def _overlay_diff(work: Path, overlay: Path) -> str:
    _reset(work)
    shutil.copytree(overlay, work, dirs_exist_ok=True)
    _git(work, "add", "-A")
    diff = _git(work, "diff", "--cached", "--no-color", "--no-ext-diff", "--no-renames")
    _reset(work)
    return diff


def _run_tests(work: Path, patches: list[str], targets: list[str]) -> dict[str, TestStatus]:
    _reset(work)
    for patch in patches:
        subprocess.run(["git", "apply", "-"], cwd=work, input=patch, text=True, check=True)
    argv = [sys.executable, "-m", "pytest", "-rA", "--tb=no", "-p", "no:cacheprovider", *targets]
    result = subprocess.run(argv, cwd=work, capture_output=True, text=True)
    _reset(work)
    statuses = parse_log_pytest(result.stdout)
    # drop SWE-bench's first-word keys of ids with spaces: the manifest names tests by their full ids
    aliases = {test.split()[0] for test in statuses if " " in test}
    return {test: status for test, status in statuses.items() if test not in aliases}


def instance_row(instance_dir: Path, work: Path, base_commit: str, *, run_tests: bool = True) -> dict[str, Any]:
    """The manifest row of one demo instance; FAIL_TO_PASS/PASS_TO_PASS are empty when ``run_tests`` is False."""
    instance_id = instance_dir.name
    repo_name = instance_id.split("__", 1)[1].rsplit("-", 1)[0]
    gold = _overlay_diff(work, instance_dir / "gold")
    test_patch = _overlay_diff(work, instance_dir / "test")
    fail_to_pass: list[str] = []
    pass_to_pass: list[str] = []
    if run_tests:
        targets = runner_targets(test_patch)
        before = _run_tests(work, [test_patch], targets)
        after = _run_tests(work, [gold, test_patch], targets)
        fail_to_pass = [t for t in after if is_passing(t, after) and is_failing(t, before)]
        pass_to_pass = [t for t in after if is_passing(t, after) and is_passing(t, before)]
    return {
        "repo": f"{OWNER}/{repo_name}",
        "instance_id": instance_id,
        "base_commit": base_commit,
        "patch": gold,
        "test_patch": test_patch,
        "problem_statement": (instance_dir / "problem.md").read_text(encoding="utf-8"),
        "hints_text": "",
        "version": VERSIONS[repo_name],
        "environment_setup_commit": base_commit,
        "FAIL_TO_PASS": fail_to_pass,
        "PASS_TO_PASS": pass_to_pass,
        "image": f"{OWNER}/{repo_name}:{VERSIONS[repo_name]}",
        "test_cmd": TEST_CMD,
        "build": {"context": ".", "dockerfile": "Dockerfile", "args": {"REPO": repo_name}},
    }


def build_rows(*, run_tests: bool = True) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for repo_name in sorted(VERSIONS):
        with base_checkout(repo_name) as (work, base_commit):
            prefix = f"{OWNER}__{repo_name}-"
            dirs = sorted((HERE / "instances").glob(f"{prefix}*"), key=lambda d: int(d.name[len(prefix) :]))
            rows.extend(instance_row(d, work, base_commit, run_tests=run_tests) for d in dirs)
    return rows


def render(rows: list[dict[str, Any]]) -> bytes:
    return b"".join(orjson.dumps(row) + b"\n" for row in rows)


def main(argv: list[str]) -> int:
    rows = build_rows()
    for row in rows:
        if not row["FAIL_TO_PASS"]:
            print(f"{row['instance_id']}: no FAIL_TO_PASS test: the test patch does not show the bug", file=sys.stderr)
            return 1
    text = render(rows)
    target = HERE / "instances.jsonl"
    if "--check" in argv:
        if not target.exists() or target.read_bytes() != text:
            print(f"{target} is out of date: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    target.write_bytes(text)
    print(f"wrote {len(rows)} instances to {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
