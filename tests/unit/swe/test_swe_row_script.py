"""A SWE-bench 5 row's own eval_script: the text 5.0.2 writes to /eval.sh, run with the host's bash, git and pytest on
a demo checkout (no Docker), and graded as 5.0.2 grades the same log.

The rows' scripts are SWE-bench 4.x's ``make_eval_script_list`` output; the one here has the same shape without the
conda lines (the host has no conda env): reset the test files, test patch in a heredoc, test command between the
``: '>>>>> ...'`` markers that ``set -x`` echoes, reset again.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from swebench.harness.grading import get_eval_report
from swebench.harness.utils import make_test_spec

from polar_cli.swe import grading
from polar_cli.swe.diffs import touched_paths
from polar_cli.swe.evaluate import apply_script, instance_eval_script, runner_exit_code
from polar_cli.swe.grading import grade_log
from polar_cli.swe.logparse import parser_for
from polar_cli.swe.manifest import Instance, load_manifest
from polar_cli.swe.row_script import row_eval_script

DEMO = Path(__file__).resolve().parents[3] / "recipes" / "demo"
TEST_CMD = f"{sys.executable} -m pytest -rA --tb=no -p no:cacheprovider"
HEREDOC = "EOF_114329324912"


def swebench5_script(instance: Instance, work: Path) -> str:
    """A row's eval_script as SWE-bench 5 datasets carry it (4.x's make_eval_script_list, conda lines left out)."""
    files = " ".join(touched_paths(instance.test_patch))
    reset = f"git checkout {instance.base_commit} {files}"
    return "\n".join(
        [
            "#!/bin/bash",
            "set -uxo pipefail",
            f"cd {work}",
            f"git config --global --add safe.directory {work}",
            "git status",
            f"git -c core.fileMode=false diff {instance.base_commit}",
            reset,
            f"git apply -v - <<'{HEREDOC}'\n{instance.test_patch}\n{HEREDOC}",
            f": '{grading.START_TEST_OUTPUT}'",
            f"{TEST_CMD} {files}",
            f": '{grading.END_TEST_OUTPUT}'",
            reset,
        ]
    )


def swebench_row(instance: Instance, script: str, eval_type: str = "pass_and_fail") -> dict[str, Any]:
    return {
        "instance_id": instance.instance_id,
        "image": "unused",
        "repo": instance.repo,
        "version": "",
        "FAIL_TO_PASS": list(instance.fail_to_pass),
        "PASS_TO_PASS": list(instance.pass_to_pass),
        "log_parser": "parse_log_pytest",
        "eval_type": eval_type,
        "eval_script": script,
    }


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"  # the script writes `git config --global`: keep that away from the real home
    home.mkdir()
    return {
        **os.environ,
        "HOME": str(home),
        "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
        "GIT_CONFIG_NOSYSTEM": "1",
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
    }


@pytest.fixture
def textkit(tmp_path: Path, env: dict[str, str]) -> Path:
    work = tmp_path / "textkit"
    shutil.copytree(DEMO / "repos" / "textkit", work, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["sh", str(DEMO / "make_history.sh"), "textkit"], cwd=work, env=env, check=True, capture_output=True)
    return work


@pytest.fixture(scope="module")
def instance() -> Instance:
    return next(i for i in load_manifest(DEMO / "instances.jsonl") if i.instance_id == "polar-demo__textkit-12")


def run(script: str, where: Path, env: dict[str, str]) -> str:
    """stdout and stderr on one pipe, as a container exec interleaves them (the markers are set -x trace lines)."""
    path = where.parent / "eval.sh"
    path.write_text(script)
    done = subprocess.run(
        ["bash", str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120
    )
    return done.stdout


@pytest.mark.parametrize(
    "script",
    [
        "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n: '>>>>> Start Test Output'\npytest -rA\n"
        ": '>>>>> End Test Output'\ngit checkout abc tests/t.py\n",
        # no header; a header line in the middle; surrounding blank lines
        "\n\ncd /testbed\nset -uxo pipefail\n: '>>>>> Start Test Output'\npytest\n: '>>>>> End Test Output'\n\n",
        # two end markers: only the first records the status
        ": '>>>>> Start Test Output'\nA\n: '>>>>> End Test Output'\nB\n: '>>>>> End Test Output'",
        # no end marker: left as it is
        "#!/bin/bash\nset -uxo pipefail\npytest -rA",
    ],
)
def test_the_script_is_the_one_swebench_502_writes_to_eval_sh(script: str, instance: Instance) -> None:
    expected = make_test_spec(swebench_row(instance, script)).eval_script
    assert row_eval_script(script) == expected


def test_the_row_script_runs_instead_of_ours() -> None:
    row = Instance("o__r-1", "o/unknown", "a" * 40, "", "", "", (), (), eval_script="echo mine")
    # a repository with no known test command needs none when the row brings its script
    assert instance_eval_script(row).endswith("\necho mine\n")
    assert "echo mine" not in instance_eval_script(row, "pytest -x")  # an explicit test command overrides it


def test_row_script_on_a_checkout_grades_as_swebench_502(
    instance: Instance, textkit: Path, env: dict[str, str], tmp_path: Path
) -> None:
    script = swebench5_script(instance, textkit)
    row = dataclasses.replace(instance, eval_script=script, log_parser="parse_log_pytest")
    parser = parser_for(row.repo, row.log_parser)
    spec = make_test_spec(swebench_row(instance, script))
    logs = {}
    for name, patch in (("without fix", None), ("gold", instance.patch)):
        if patch is not None:
            (tmp_path / "model.patch").write_text(patch)
            applied = run(apply_script(str(tmp_path / "model.patch"), touched_paths(patch), str(textkit)), textkit, env)
            assert grading.APPLY_PATCH_PASS in applied
        log = logs[name] = run(instance_eval_script(row), textkit, env)
        ours = grade_log(log, row.fail_to_pass, row.pass_to_pass, parser, "pass_and_fail")
        (tmp_path / "test_output.txt").write_text(log)
        pred = {"instance_id": instance.instance_id, "model_patch": patch or "", "model_name_or_path": "m"}
        theirs = get_eval_report(spec, pred, str(tmp_path / "test_output.txt"), True)[instance.instance_id]
        assert ours.tests is not None, (name, ours.reason, log)
        assert (ours.resolved, ours.tests.to_swebench()) == (theirs["resolved"], theirs["tests_status"]), name
    assert runner_exit_code(logs["without fix"]) == 1 and runner_exit_code(logs["gold"]) == 0
    # the status is echoed after the end marker, outside the parsed region
    assert logs["gold"].split(grading.END_TEST_OUTPUT, 1)[1].count(f"{grading.TEST_EXIT_CODE}: 0") >= 1
    assert not grade_log(logs["without fix"], row.fail_to_pass, row.pass_to_pass, parser).resolved
    assert grade_log(logs["gold"], row.fail_to_pass, row.pass_to_pass, parser).resolved
