"""The generated apply and eval scripts, run with the host's bash, git, patch and pytest on a demo checkout.

No Docker: the same scripts run inside instance containers (tests/integration/swe).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from polar_cli.swe import grading
from polar_cli.swe.diffs import touched_paths
from polar_cli.swe.evaluate import ALREADY_APPLIED_CHECK, APPLY_COMMANDS, apply_script, eval_script, runner_exit_code
from polar_cli.swe.grading import grade_log
from polar_cli.swe.logparse import parse_log_pytest
from polar_cli.swe.manifest import Instance, load_manifest

DEMO = Path(__file__).resolve().parents[3] / "recipes" / "demo"
TEST_CMD = f"{sys.executable} -m pytest -rA --tb=no -p no:cacheprovider"


@pytest.fixture(scope="module")
def demo() -> dict[str, Instance]:
    return {i.instance_id: i for i in load_manifest(DEMO / "instances.jsonl")}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    # the scripts write `git config --global`: keep that away from the real home
    home = tmp_path / "home"
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


def run(script: str, where: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    path = where.parent / "script.sh"
    path.write_text(script)
    return subprocess.run(["bash", str(path)], env=env, capture_output=True, text=True, timeout=120)


def apply(patch: str, work: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    patch_file = work.parent / "model.patch"
    patch_file.write_text(patch)
    return run(apply_script(str(patch_file), touched_paths(patch), str(work)), work, env)


def evaluate(instance: Instance, work: Path, env: dict[str, str]) -> grading.Grade:
    test_patch = work.parent / "test.patch"
    test_patch.write_text(instance.test_patch)
    result = run(eval_script(instance, TEST_CMD, str(test_patch), str(work), conda=False), work, env)
    return grade_log(result.stdout + result.stderr, instance.fail_to_pass, instance.pass_to_pass, parse_log_pytest)


def status(work: Path, env: dict[str, str]) -> str:
    argv = ["git", "status", "--porcelain", "--untracked-files=all"]
    return subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, check=True).stdout


def test_gold_patch_applies_with_git_apply_and_resolves(
    demo: dict[str, Instance], textkit: Path, env: dict[str, str]
) -> None:
    instance = demo["polar-demo__textkit-7"]
    applied = apply(instance.patch, textkit, env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert f"{grading.APPLY_PATCH_PASS} (git apply --verbose)" in applied.stdout
    grade = evaluate(instance, textkit, env)
    assert grade.resolved, grade


def test_without_a_patch_fail_to_pass_fails(demo: dict[str, Instance], textkit: Path, env: dict[str, str]) -> None:
    instance = demo["polar-demo__textkit-7"]
    grade = evaluate(instance, textkit, env)
    assert grade.tests is not None
    assert grade.tests.fail_to_pass_failure == instance.fail_to_pass
    assert grade.tests.pass_to_pass_success == instance.pass_to_pass
    assert not grade.resolved


def test_patch_with_drifted_context_falls_back_to_gnu_patch(
    demo: dict[str, Instance], textkit: Path, env: dict[str, str]
) -> None:
    instance = demo["polar-demo__textkit-19"]
    # the agent's tree had a different docstring line: git apply refuses the hunk, patch --fuzz takes it
    drifted = instance.patch.replace("     if max_length is not None:", "     if max_length is not None:  # cap", 1)
    assert drifted != instance.patch
    applied = apply(drifted, textkit, env)
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert "polar: 'git apply --verbose' failed" in applied.stdout
    assert f"{grading.APPLY_PATCH_PASS} (patch --batch --forward --fuzz=5 -p1 -i)" in applied.stdout
    assert evaluate(instance, textkit, env).resolved


def test_patch_that_does_not_apply_leaves_the_tree_clean(
    demo: dict[str, Instance], textkit: Path, env: dict[str, str]
) -> None:
    good = demo["polar-demo__textkit-12"].patch  # applies
    bad = """\
diff --git a/textkit/slug.py b/textkit/slug.py
--- a/textkit/slug.py
+++ b/textkit/slug.py
@@ -40,3 +40,3 @@ def nowhere():
 this context
-does not
+exist anywhere
 in the file
"""
    applied = apply(good + bad, textkit, env)
    assert applied.returncode == 1
    assert applied.stdout.rstrip().endswith(grading.APPLY_PATCH_FAIL)
    # `git apply --reject` applied the truncate hunk and wrote .rej files: the rollback undid both
    assert status(textkit, env) == ""


def test_patch_that_edits_the_tests_does_not_count(
    demo: dict[str, Instance], textkit: Path, env: dict[str, str]
) -> None:
    instance = demo["polar-demo__textkit-12"]
    # no fix: the "agent" rewrites the test file so that every FAIL_TO_PASS test passes trivially
    cheat = (textkit / "tests" / "test_truncate.py").read_text() + (
        "\n\n@pytest.mark.parametrize('width', [0, 1, 2, 3])\n"
        "def test_result_never_exceeds_width(width):\n    pass\n\n\n"
        "def test_tiny_width_keeps_placeholder_prefix():\n    pass\n"
    )
    (textkit / "tests" / "test_truncate.py").write_text(cheat)
    grade = evaluate(instance, textkit, env)
    assert grade.tests is not None
    assert set(grade.tests.fail_to_pass_failure) == set(instance.fail_to_pass)
    assert not grade.resolved


def test_new_test_file_planted_by_the_patch_is_replaced(
    demo: dict[str, Instance], textkit: Path, env: dict[str, str]
) -> None:
    new_test = (
        "diff --git a/tests/test_extra.py b/tests/test_extra.py\nnew file mode 100644\n--- /dev/null\n"
        "+++ b/tests/test_extra.py\n@@ -0,0 +1,5 @@\n+from textkit import truncate\n+\n+\n"
        "+def test_extra():\n+    assert truncate('abcdefgh', 2) == '..'\n"
    )
    instance = dataclasses.replace(
        demo["polar-demo__textkit-12"],
        test_patch=new_test,
        fail_to_pass=("tests/test_extra.py::test_extra",),
        pass_to_pass=(),
    )
    # SWE-bench leaves such a file alone and its test patch then fails to apply; we remove it first
    (textkit / "tests" / "test_extra.py").write_text("def test_extra():\n    pass\n")
    grade = evaluate(instance, textkit, env)
    assert grade.tests is not None and grade.tests.fail_to_pass_failure == ("tests/test_extra.py::test_extra",)
    assert apply(demo["polar-demo__textkit-12"].patch, textkit, env).returncode == 0
    assert evaluate(instance, textkit, env).resolved


def test_unknown_base_commit_is_a_reset_failure(demo: dict[str, Instance], textkit: Path, env: dict[str, str]) -> None:
    instance = dataclasses.replace(demo["polar-demo__textkit-7"], base_commit="0" * 40)
    grade = evaluate(instance, textkit, env)
    assert (grade.resolved, grade.reason) == (False, "resetting the test files failed")


def test_test_patch_that_does_not_apply_stops_the_run(
    demo: dict[str, Instance], textkit: Path, env: dict[str, str]
) -> None:
    instance = dataclasses.replace(demo["polar-demo__textkit-7"], test_patch=demo["polar-demo__csvsift-4"].test_patch)
    grade = evaluate(instance, textkit, env)
    assert (grade.resolved, grade.reason) == (False, "the test patch did not apply")


def test_apply_commands_are_swebench_502s_in_its_order() -> None:
    from swebench.harness.run_evaluation import GIT_APPLY_CMDS

    assert list(APPLY_COMMANDS) == GIT_APPLY_CMDS
    script = apply_script("/tmp/p.patch", ["a.py"])
    tries = [line.removeprefix("try ").removesuffix(" && exit 0").strip("'") for line in script.splitlines()]
    assert [t for t in tries if t in GIT_APPLY_CMDS] == GIT_APPLY_CMDS
    # the already-applied check comes after every attempt, as in 5.0.2
    assert script.index(ALREADY_APPLIED_CHECK) > script.index(GIT_APPLY_CMDS[-1])


def test_already_applied_patch_is_accepted(demo: dict[str, Instance], textkit: Path, env: dict[str, str]) -> None:
    instance = demo["polar-demo__textkit-7"]
    assert apply(instance.patch, textkit, env).returncode == 0
    after_first = status(textkit, env)
    again = apply(instance.patch, textkit, env)
    assert again.returncode == 0, again.stdout + again.stderr
    # every command refuses it, in 5.0.2's order; then 5.0.2's reverse check accepts it
    failed = [c for c in APPLY_COMMANDS if f"polar: '{c}' failed" in again.stdout]
    assert failed == list(APPLY_COMMANDS), again.stdout
    assert f"{grading.APPLY_PATCH_PASS} (already applied: {ALREADY_APPLIED_CHECK} succeeds)" in again.stdout
    # each rollback restored the tree as it was (patch still applied, no .rej/.orig left)
    assert status(textkit, env) == after_first
    assert evaluate(instance, textkit, env).resolved


def test_eval_script_writes_swebenchs_exit_code_marker_after_the_end_marker(
    demo: dict[str, Instance], textkit: Path, env: dict[str, str]
) -> None:
    from swebench.harness import constants

    assert (grading.TEST_EXIT_CODE, grading.TEST_EXIT_CODE_VAR) == (
        constants.TEST_EXIT_CODE,
        constants.TEST_EXIT_CODE_VAR,
    )
    instance = demo["polar-demo__textkit-7"]
    test_patch = textkit.parent / "test.patch"
    test_patch.write_text(instance.test_patch)
    script = eval_script(instance, TEST_CMD, str(test_patch), str(textkit), conda=False)
    assert f'echo "{constants.TEST_EXIT_CODE}: ${constants.TEST_EXIT_CODE_VAR}"\n' in script
    log = run(script, textkit, env).stdout
    # without the fix FAIL_TO_PASS fails: pytest exits 1, recorded after the end marker
    tail = log.split(grading.END_TEST_OUTPUT, 1)[1]
    assert tail.strip() == ">>>>> Test Exit Code: 1"
    assert runner_exit_code(log) == 1
