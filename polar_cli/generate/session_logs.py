"""Each graded session's whole evaluation logs in the run directory, and the bounded excerpt its row carries.

Why: a row that says "unresolved" is only checkable with the test run that said so, and a corpus row cannot carry a
log of megabytes. So every evaluation (not only with ``output.keep_artifacts``) is written whole with
`swe.eval_logs.RunLogs`, atomically, in SWE-bench's layout with one directory per session:

    <run dir>/logs/run_evaluation/<run_id>/<model>/<session_id>/{test_output.txt, run_instance.log, report.json}

``run_id`` is the recipe's name (else the run directory's). SWE-bench names the last level by the instance id; one
generate run grades many sessions of an instance (harnesses x attempts, and retries of an errored try), so the
level is the session id, ``<instance_id>.<harness>.<attempt>.<token>``, which starts with the instance id and is
never reused: the log a row links is the log of that row's session. The row keeps that path (relative to the run
directory) and `log_excerpt`: the test output's last `TAIL_CHARS` characters and the lines that name the graded
tests that failed.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from polar_cli.swe.eval_logs import RunLogs
from polar_cli.swe.evaluate import Evaluation

log = logging.getLogger("polar.generate")

TAIL_CHARS = 4000
# the failing tests looked up, the lines kept per test (the last ones: a runner's summary comes last), in all, length
FAILING_TESTS = 20
LINES_PER_TEST = 2
FAILING_LINES = 20
LINE_CHARS = 300


def run_logs(run_dir: Path, name: str | None) -> RunLogs:
    """The run's log tree: rooted at the run directory, ``run_id`` the recipe's name (else the directory's)."""
    return RunLogs(run_dir, name or run_dir.resolve().name or "generate")


def write_session_logs(logs: RunLogs, evaluation: Evaluation, session_id: str) -> str:
    """Write the session's logs; returns test_output.txt's path relative to the run directory (OSError on failure)."""
    return str(logs.write(evaluation, session_id)["log_path"])


def keep_session_logs(logs: RunLogs, evaluation: Evaluation, session_id: str) -> str | None:
    """`write_session_logs`, for a session whose row goes on without them: a disk that refuses is logged (None)."""
    try:
        return write_session_logs(logs, evaluation, session_id)
    except OSError as exc:
        log.warning("session %s: writing its evaluation logs failed: %s", session_id, exc)
        return None


def failing_tests(evaluation: Evaluation) -> list[str]:
    """The graded tests that failed, FAIL_TO_PASS first, as grading named them."""
    tests = evaluation.grade.tests
    return [*tests.fail_to_pass_failure, *tests.pass_to_pass_failure] if tests is not None else []


def _lines_naming(text: str, name: str, limit: int) -> list[str]:
    """The last ``limit`` lines of ``text`` that contain ``name`` (found with str.rfind: C speed on a long log)."""
    found: list[str] = []
    end = len(text)
    while len(found) < limit and name:
        at = text.rfind(name, 0, end)
        if at < 0:
            break
        start = text.rfind("\n", 0, at) + 1
        stop = text.find("\n", at)
        line = text[start : stop if stop >= 0 else len(text)]
        found.append(line[:LINE_CHARS])
        end = start
    return found[::-1]


def log_excerpt(evaluation: Evaluation) -> dict[str, Any]:
    """``tail``: the test output's last TAIL_CHARS characters; ``failing``: the lines naming failed graded tests."""
    output = evaluation.test_output
    lines: list[str] = []
    for test in failing_tests(evaluation)[:FAILING_TESTS]:
        for line in _lines_naming(output, test, LINES_PER_TEST):
            if line not in lines:
                lines.append(line)
    return {"tail": output[-TAIL_CHARS:], "failing": lines[:FAILING_LINES]}
