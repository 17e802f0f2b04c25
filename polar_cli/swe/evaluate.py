"""Evaluate a candidate patch in a fresh container from the instance image, the way SWE-bench's harness does.

1. Apply the patch in /testbed with SWE-bench 5.0.2's commands in its order (`APPLY_COMMANDS`, its
   ``GIT_APPLY_CMDS``). A failed attempt is rolled back (the files the patch touches, back to how they were
   before the first attempt; their index entries to HEAD) so each fallback starts clean. If every attempt fails
   but ``git apply --check --reverse`` succeeds, the patch is already applied and is accepted, as 5.0.2 does.
2. Reset every file the test patch touches to the base commit (removing the ones the base commit lacks): whatever
   the patch did to the tests is gone. Then apply the test patch.
3. Run the test command on the files the test patch touches, between SWE-bench's markers, under a per-instance
   timeout; grade the log (`grading`). The command is the row's ``test_cmd``, else the repository's in
   `repos.REPOS`, with the files as that runner's directives (Django: dotted labels); a repository that has
   neither is an error, never a pytest run that cannot start. The test command's exit status is echoed after the
   end marker as SWE-bench's ``>>>>> Test Exit Code: N`` (`grading.TEST_EXIT_CODE`).

A run whose runner could not start (exit 126 or 127) or whose log lacks the test-output markers is outcome
"error": the machinery failed, the candidate did not.

The scripts are generated here as text (`apply_script`, `eval_script`), so tests can run them against a plain git
checkout without Docker.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from polar_cli.errors import ConfigError
from polar_cli.runtime.base import ContainerSpec, Runtime
from polar_cli.swe import grading
from polar_cli.swe.diffs import runner_targets, touched_paths
from polar_cli.swe.grading import Grade
from polar_cli.swe.images import ensure_image
from polar_cli.swe.logparse import LogParser, parser_for
from polar_cli.swe.manifest import Instance
from polar_cli.swe.repos import REPOS, directives

DEFAULT_TIMEOUT = 1800.0
APPLY_TIMEOUT = 300.0
WORKDIR = "/testbed"
EVAL_DIR = "/tmp/polar-eval"
# swebench 5.0.2 harness/run_evaluation.py GIT_APPLY_CMDS, same commands, same order
APPLY_COMMANDS = (
    "git apply --verbose",
    "git apply --verbose --3way",
    "git apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
)
# 5.0.2 accepts a patch that every command refused if this succeeds: it is already applied
ALREADY_APPLIED_CHECK = "git apply --check --reverse"
LOG_TAIL = 20_000
# SWE-bench keeps the whole log; a cap this size is only reached by a run gone wrong
OUTPUT_CAP = 64 * 1024 * 1024

Outcome = Literal["resolved", "unresolved", "error"]

# bash: 126 the command is not executable, 127 it does not exist
RUNNER_CANNOT_START = (126, 127)

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


def runner_directives(instance: Instance) -> list[str]:
    """The runner's arguments: the test files (`runner_targets`), as the repository's runner names them."""
    spec = REPOS.get(instance.repo)
    return directives(runner_targets(instance.test_patch), spec.directives if spec else "paths")


def resolve_test_command(instance: Instance, override: str | None = None) -> str:
    """The test command without its directives: ``override``, the row's ``test_cmd``, or the repository's."""
    if override or instance.test_cmd:
        return override or instance.test_cmd or ""
    spec = REPOS.get(instance.repo)
    if spec is None:
        raise ConfigError(
            f"{instance.instance_id}: repository {instance.repo!r} has no known test command; "
            "set test_cmd in the manifest row"
        )
    return spec.test_cmd


def runner_exit_code(log: str) -> int | None:
    """The test command's exit status as the eval script printed it (`grading.test_exit_code`), if it did."""
    return grading.test_exit_code(log)


def eval_script(
    instance: Instance, test_cmd: str, test_patch_path: str, workdir: str = WORKDIR, *, conda: bool = True
) -> str:
    """Bash that resets the test files, applies the test patch and runs the tests between the markers."""
    base = shlex.quote(instance.base_commit)
    paths = " ".join(shlex.quote(p) for p in touched_paths(instance.test_patch))
    command = " ".join([test_cmd, *(shlex.quote(t) for t in runner_directives(instance))])
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


@dataclass(frozen=True, slots=True)
class Evaluation:
    """The verdict on one candidate patch. ``outcome`` is "error" only when evaluation itself could not run."""

    instance_id: str
    model: str
    outcome: Outcome
    grade: Grade
    patch_is_none: bool = False
    patch_applied: bool = False
    reason: str | None = None
    seconds: float = 0.0
    log: str = field(default="", repr=False)  # the patch-apply output, then the test run's output
    apply_log: str = field(default="", repr=False)  # the patch-apply output alone (the start of ``log``)

    @property
    def resolved(self) -> bool:
        return self.outcome == "resolved"

    @property
    def test_output(self) -> str:
        """The test run's whole output: ``log`` without the patch-apply output in front of it."""
        return self.log.removeprefix(self.apply_log)

    def to_dict(self) -> dict[str, Any]:
        """SWE-bench's per-instance report keys, plus the outcome, reason, per-test rows and the log's tail."""
        tests = self.grade.tests
        return {
            "instance_id": self.instance_id,
            "model_name_or_path": self.model,
            "outcome": self.outcome,
            "resolved": self.resolved,
            "resolved_status": self.grade.status.value,
            "patch_is_None": self.patch_is_none,
            "patch_exists": not self.patch_is_none,
            "patch_successfully_applied": self.patch_applied,
            "reason": self.reason or self.grade.reason,
            "tests_status": tests.to_swebench() if tests else None,
            "tests": tests.per_test() if tests else [],
            "seconds": round(self.seconds, 3),
            "log_tail": self.log[-LOG_TAIL:],
        }


@dataclass(frozen=True, slots=True)
class EvalOptions:
    image: str
    timeout: float = DEFAULT_TIMEOUT
    test_cmd: str | None = None  # overrides the row's test_cmd
    parser: LogParser | None = None  # overrides the repository's parser
    # run the tests even when the patch is empty (validation: FAIL_TO_PASS must fail before the fix)
    run_empty: bool = False


def _decode(output: bytes) -> str:
    return output.decode("utf-8", errors="replace")


def evaluate_instance(
    runtime: Runtime, instance: Instance, patch: str | None, options: EvalOptions, model: str = ""
) -> Evaluation:
    """Apply ``patch`` to a fresh container of ``options.image`` and grade the instance's tests.

    Broken patches, timeouts and missing markers are "unresolved" (SWE-bench Rule 5); a missing image or a failing
    engine raises (`RuntimeFailure`), which `evaluate_many` records as outcome "error".
    """
    start = time.monotonic()

    apply_log = ""

    def verdict(grade: Grade, *, applied: bool, log: str = "", reason: str | None = None) -> Evaluation:
        outcome: Outcome = "resolved" if grade.resolved else "unresolved"
        seconds = time.monotonic() - start
        return Evaluation(
            instance.instance_id, model, outcome, grade, patch is None, applied, reason, seconds, log, apply_log
        )

    if patch is None:
        return verdict(grading.unresolved("no patch (model_patch is null)"), applied=False)
    empty = not patch.strip()
    if empty and not options.run_empty:
        # SWE-bench: an empty patch fails every apply command, so the instance is unresolved without running tests
        return verdict(grading.unresolved("empty patch"), applied=False)
    ensure_image(runtime, options.image)
    parser = options.parser or parser_for(instance.repo)
    test_cmd = resolve_test_command(instance, options.test_cmd)
    container = runtime.start(ContainerSpec(image=options.image, role="eval", network="none", workdir=WORKDIR))
    try:
        container.put_files(
            {
                f"{EVAL_DIR}/model.patch": patch.encode(),
                f"{EVAL_DIR}/test.patch": instance.test_patch.encode(),
                f"{EVAL_DIR}/apply.sh": apply_script(f"{EVAL_DIR}/model.patch", touched_paths(patch)).encode(),
                f"{EVAL_DIR}/eval.sh": eval_script(instance, test_cmd, f"{EVAL_DIR}/test.patch").encode(),
            }
        )
        log = ""
        if not empty:
            applied = container.exec(["bash", f"{EVAL_DIR}/apply.sh"], timeout=min(APPLY_TIMEOUT, options.timeout))
            log = apply_log = _decode(applied.output)
            if applied.timed_out or applied.exit_code != 0:
                return verdict(grading.unresolved("the patch did not apply"), applied=False, log=log)
        run = container.exec(["bash", f"{EVAL_DIR}/eval.sh"], timeout=options.timeout, output_cap=OUTPUT_CAP)
        log += _decode(run.output)
        if run.truncated:
            log += f"\npolar: test output cut at {OUTPUT_CAP // 2**20} MiB\n"
        if run.timed_out:
            log += f"\n{grading.TESTS_TIMEOUT} after {options.timeout:g} s\n"
            reason = f"the tests timed out after {options.timeout:g} s"
            return verdict(grading.unresolved(reason), applied=not empty, log=log)
        fault = None if run.truncated else _machinery_fault(log)
        if fault is not None:
            return Evaluation(
                instance.instance_id,
                model,
                "error",
                grading.unresolved(fault),
                patch is None,
                not empty,
                fault,
                time.monotonic() - start,
                log,
                apply_log,
            )
        grade = grading.grade_log(log, instance.fail_to_pass, instance.pass_to_pass, parser)
        return verdict(grade, applied=not empty, log=log)
    finally:
        container.remove()


def _machinery_fault(log: str) -> str | None:
    """Why a finished run says nothing about the patch: the runner did not start, or the markers are missing."""
    code = runner_exit_code(log)
    if code in RUNNER_CANNOT_START:
        return f"the test runner could not start (exit {code}): check the image and the test command"
    if grading.failure_marker(log) is None and (
        grading.START_TEST_OUTPUT not in log or grading.END_TEST_OUTPUT not in log
    ):
        return "the eval script ended without the test-output markers"
    return None


@dataclass(frozen=True, slots=True)
class EvalJob:
    instance: Instance
    patch: str | None
    options: EvalOptions
    model: str = ""


def run_job(runtime: Runtime, job: EvalJob) -> Evaluation:
    """`evaluate_instance`, with a failure of the evaluation itself recorded as outcome "error" instead of raised."""
    start = time.monotonic()
    try:
        return evaluate_instance(runtime, job.instance, job.patch, job.options, job.model)
    except Exception as exc:  # one broken instance (missing image, engine hiccup) must not sink the batch
        reason = f"evaluation failed: {exc}"
        grade = grading.unresolved(reason)
        seconds = time.monotonic() - start
        return Evaluation(
            job.instance.instance_id, job.model, "error", grade, job.patch is None, reason=reason, seconds=seconds
        )


def evaluate_many(
    runtime: Runtime, jobs: Sequence[EvalJob], *, workers: int = 1, on_done: Callable[[Evaluation], None] | None = None
) -> list[Evaluation]:
    """Run ``jobs`` on ``workers`` threads; results come back in job order."""
    from concurrent.futures import ThreadPoolExecutor

    def one(job: EvalJob) -> Evaluation:
        result = run_job(runtime, job)
        if on_done is not None:
            on_done(result)
        return result

    if workers <= 1:
        return [one(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="polar-eval") as pool:
        return list(pool.map(one, jobs))
