"""A SWE-bench 5 row's own ``eval_script``, made ready to run exactly as swebench 5.0.2 runs it.

SWE-bench 5 rows carry the whole eval script (conda activation, resetting the test files, the test patch in a heredoc,
the test command between ``: '>>>>> Start Test Output'`` and ``: '>>>>> End Test Output'``, whose ``set -x`` trace is
what puts the markers in the log, then resetting the test files again). 5.0.2 (``make_test_spec``) strips the
``#!/bin/bash`` and ``set -uxo pipefail`` lines, records the test command's exit status around the first end-marker
line (``record_test_exit_code``: the script's own status is the final reset's), and puts the two header lines back
on top; then it runs the result with ``/bin/bash`` in the container. `row_eval_script` produces the same text.

Polar's own generated script (`scripts.eval_script`) is used only for rows without one.
"""

from __future__ import annotations

from collections.abc import Sequence

from polar_cli.swe import grading

# the header 5.0.2 drops wherever it stands and puts back on top (TestSpec.eval_script)
SCRIPT_HEADER = ("#!/bin/bash", "set -uxo pipefail")


def record_exit_code(lines: Sequence[str]) -> list[str]:
    """``lines`` with the test command's status saved just before the first end-marker line and echoed after it.

    The echo stands after the end marker, so the status stays outside the parsed region. A script without an end
    marker is left as it is (5.0.2 too): grading then has no exit code to check.
    """
    for index, line in enumerate(lines):
        if grading.END_TEST_OUTPUT in line:
            return [
                *lines[:index],
                f"{grading.TEST_EXIT_CODE_VAR}=$?",
                line,
                f'echo "{grading.TEST_EXIT_CODE}: ${grading.TEST_EXIT_CODE_VAR}"',
                *lines[index + 1 :],
            ]
    return list(lines)


def row_eval_script(script: str) -> str:
    """The row's ``eval_script`` as 5.0.2 writes it to /eval.sh: header on top, exit status recorded."""
    body = [line for line in script.strip().split("\n") if line not in SCRIPT_HEADER]
    return "\n".join([*SCRIPT_HEADER, *record_exit_code(body)]) + "\n"
