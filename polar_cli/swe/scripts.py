"""The apply and eval scripts `evaluate` runs in the container, generated as text so tests can run them on a plain
git checkout without Docker (`evaluate`'s docstring says what each step does and why).

`apply_script` applies the candidate patch with swebench 5.0.2's commands in its order, rolling a failed attempt back;
`eval_script` resets the test files, applies the test patch and runs the tests between SWE-bench's markers, echoing
the test command's status after the end marker. A SWE-bench 5 row's own script is `row_script`'s.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from polar_cli.swe import grading
from polar_cli.swe.diffs import Patch, runner_targets
from polar_cli.swe.manifest import Instance
from polar_cli.swe.repos import REPOS, directives

WORKDIR = "/testbed"
# swebench 5.0.2 harness/run_evaluation.py GIT_APPLY_CMDS, same commands, same order
APPLY_COMMANDS = (
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
)
# 5.0.2 accepts a patch that every command refused if this succeeds: it is already applied
ALREADY_APPLIED_CHECK = "git apply --check --reverse"

# SWE-bench and SWE-Gym images keep the repository's environment in this conda env
_CONDA = (
    "if [ -f /opt/miniconda3/bin/activate ]; then\n"
    "  source /opt/miniconda3/bin/activate && conda activate testbed\n"
    "fi\n"
)


def apply_script(patch_path: str, touched: Sequence[str], workdir: str = WORKDIR) -> str:
    """Bash that applies ``patch_path`` with SWE-bench's fallbacks; exits 0 and prints APPLY_PATCH_PASS on success."""
    paths = " ".join(shlex.quote(p) for p in touched)
    attempts = "\n".join(f"try {shlex.quote(command)} && exit 0" for command in APPLY_COMMANDS)
    return f"""#!/bin/bash
cd {shlex.quote(workdir)} || exit 1
git config --global --add safe.directory {shlex.quote(workdir)} 2>/dev/null
patch_file={shlex.quote(patch_path)}
# rollback restores the touched files as they were before the first attempt (index: HEAD, --3way stages)
backup=$(mktemp -d) || exit 1
for p in {paths}; do
  if [ -e "$p" ]; then mkdir -p -- "$backup/$(dirname -- "$p")" && cp -p -- "$p" "$backup/$p"; fi
done
rollback() {{
  for p in {paths}; do
    git reset -q -- "$p" >/dev/null 2>&1
    if [ -e "$backup/$p" ]; then cp -p -- "$backup/$p" "$p"; else rm -f -- "$p"; fi
    for extra in "$p.rej" "$p.orig"; do [ -e "$backup/$extra" ] || rm -f -- "$extra"; done
  done
}}
try() {{
  if $1 "$patch_file"; then echo "{grading.APPLY_PATCH_PASS} ($1)"; return 0; fi
  echo "polar: '$1' failed"
  rollback
  return 1
}}
{attempts}
if {ALREADY_APPLIED_CHECK} "$patch_file" 2>/dev/null; then
  echo "{grading.APPLY_PATCH_PASS} (already applied: {ALREADY_APPLIED_CHECK} succeeds)"
  exit 0
fi
echo "{grading.APPLY_PATCH_FAIL}"
exit 1
"""


def runner_directives(instance: Instance, test_patch: Patch | None = None) -> list[str]:
    """The runner's arguments: the test files (`runner_targets`), as the repository's runner names them;
    ``test_patch`` is the instance's, when the caller has parsed it."""
    spec = REPOS.get(instance.repo)
    return directives(runner_targets(test_patch or instance.test_patch), spec.directives if spec else "paths")


def eval_script(
    instance: Instance,
    test_cmd: str,
    test_patch_path: str,
    workdir: str = WORKDIR,
    *,
    conda: bool = True,
    test_patch: Patch | None = None,
) -> str:
    """Bash that resets the test files, applies the test patch and runs the tests between the markers
    (``test_patch``: the instance's, when the caller has parsed it)."""
    base = shlex.quote(instance.base_commit)
    test_patch = test_patch or Patch.parse(instance.test_patch)
    paths = " ".join(shlex.quote(p) for p in test_patch.touched_paths())
    command = " ".join([test_cmd, *(shlex.quote(t) for t in runner_directives(instance, test_patch))])
    return f"""#!/bin/bash
set -o pipefail
{_CONDA if conda else ""}cd {shlex.quote(workdir)} || exit 1
git config --global --add safe.directory {shlex.quote(workdir)} 2>/dev/null
if ! git cat-file -e {base}^{{commit}} 2>/dev/null; then
  echo "polar: base commit {instance.base_commit} is not in this repository"
  echo "{grading.RESET_FAILED}"
  exit 1
fi
for p in {paths}; do
  if git cat-file -e {base}:"$p" 2>/dev/null; then
    git checkout -q {base} -- "$p" || {{ echo "{grading.RESET_FAILED}"; exit 1; }}
  else
    rm -rf -- "$p"
  fi
done
git apply --verbose {shlex.quote(test_patch_path)} || {{ echo "{grading.TEST_PATCH_FAIL}"; exit 1; }}
echo "{grading.START_TEST_OUTPUT}"
{command}
{grading.TEST_EXIT_CODE_VAR}=$?
echo "{grading.END_TEST_OUTPUT}"
echo "{grading.TEST_EXIT_CODE}: ${grading.TEST_EXIT_CODE_VAR}"
"""
