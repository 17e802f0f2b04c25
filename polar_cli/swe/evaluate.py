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

A SWE-bench 5 row that carries its own ``eval_script`` has it run instead of step 2-3's generated script, as 5.0.2
runs it (`row_script`), graded with the row's ``log_parser`` and ``eval_type``. The container's network is
``EvalOptions.network``: Docker's default bridge unless told otherwise, as 5.0.2 creates its evaluation containers.

Before step 1 the patch is screened for changes to test infrastructure that the test patch does not own (`tamper`,
``EvalOptions.tamper``): reject makes the attempt unresolved without applying it, revert drops those files' changes
and grades the rest, off (SWE-bench exact) only records them (``Evaluation.tamper``).

A run whose runner could not start (exit 126 or 127) or whose log lacks the test-output markers is outcome
"error": the machinery failed, the candidate did not; `run_job` tries it again in a fresh container before it stands.

The scripts are generated as text (`scripts.apply_script`, `scripts.eval_script`, `row_script`), so tests can run them
against a plain git checkout without Docker.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

from polar_cli.errors import ConfigError
from polar_cli.runtime.base import Container, ContainerSpec, ExecResult, Runtime
from polar_cli.runtime.inline import exec_with_files
from polar_cli.swe import grading
from polar_cli.swe.diffs import Patch
from polar_cli.swe.grading import Grade
from polar_cli.swe.images import ensure_image
from polar_cli.swe.logparse import LogParser, parser_for
from polar_cli.swe.manifest import Instance
from polar_cli.swe.repos import REPOS
from polar_cli.swe.row_script import row_eval_script
from polar_cli.swe.scripts import ALREADY_APPLIED_CHECK as ALREADY_APPLIED_CHECK
from polar_cli.swe.scripts import APPLY_COMMANDS as APPLY_COMMANDS
from polar_cli.swe.scripts import WORKDIR, apply_script, eval_script
from polar_cli.swe.scripts import runner_directives as runner_directives
from polar_cli.swe.tamper import TamperCheck, TamperMode, config_paths, screen_patch

DEFAULT_TIMEOUT = 1800.0
APPLY_TIMEOUT = 300.0
# swebench 5.0.2 creates evaluation containers without a network setting: Docker's default bridge network
DEFAULT_NETWORK = "bridge"
EVAL_DIR = "/tmp/polar-eval"
LOG_TAIL = 20_000
# SWE-bench keeps the whole log; a cap this size is only reached by a run gone wrong
OUTPUT_CAP = 64 * 1024 * 1024

Outcome = Literal["resolved", "unresolved", "error"]
logger = logging.getLogger("polar.evaluate")

# bash: 126 the command is not executable, 127 it does not exist
RUNNER_CANNOT_START = (126, 127)


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


def instance_eval_script(instance: Instance, test_cmd: str | None = None, test_patch: Patch | None = None) -> str:
    """The script that runs the tests: the row's own ``eval_script`` unless ``test_cmd`` overrides it, else ours
    (``test_patch``: the instance's, when the caller has parsed it)."""
    if instance.eval_script and not test_cmd:
        return row_eval_script(instance.eval_script)
    command = resolve_test_command(instance, test_cmd)
    return eval_script(instance, command, f"{EVAL_DIR}/test.patch", test_patch=test_patch)


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
    network: str | None = None  # the evaluation container's network (None: no container was started)
    tamper: TamperCheck | None = None  # the reward-hack check of the patch (None: it did not run)

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
            "network": self.network,
            "tamper": self.tamper.to_dict() if self.tamper else None,
            "log_tail": self.log[-LOG_TAIL:],
        }


@dataclass(frozen=True, slots=True)
class EvalOptions:
    image: str
    timeout: float = DEFAULT_TIMEOUT
    test_cmd: str | None = None  # overrides the row's test_cmd (and its eval_script)
    parser: LogParser | None = None  # overrides the repository's parser
    # run the tests even when the patch is empty (validation: FAIL_TO_PASS must fail before the fix)
    run_empty: bool = False
    network: str = DEFAULT_NETWORK  # the evaluation container's Docker network
    # the patch's changes to test infrastructure (`tamper`): reject the attempt, revert those files, or off (SWE-bench)
    tamper: TamperMode = "reject"
    # how many times `run_job` tries an evaluation again after an error (the machinery's: `run_job`)
    error_retries: int = 1


def _decode(output: bytes) -> str:
    return output.decode("utf-8", errors="replace")


def start_container(runtime: Runtime, options: EvalOptions) -> Container:
    """A fresh container of ``options.image``, as `evaluate_instance` starts one: a caller with other work to do
    meanwhile (taking the agent's patch) starts it ahead and hands it in as ``ready``."""
    ensure_image(runtime, options.image)
    return runtime.start(ContainerSpec(image=options.image, role="eval", network=options.network, workdir=WORKDIR))


def evaluate_instance(
    runtime: Runtime,
    instance: Instance,
    patch: str | Patch | None,
    options: EvalOptions,
    model: str = "",
    ready: Container | None = None,
) -> Evaluation:
    """Apply ``patch`` (text, or already parsed: `diffs.Patch`) to a fresh container of ``options.image`` and grade
    the instance's tests. ``ready``: that container, started ahead (`start_container`); it is used or removed.

    Broken patches, timeouts and missing markers are "unresolved" (SWE-bench Rule 5); a missing image or a failing
    engine raises (`RuntimeFailure`), which `evaluate_many` records as outcome "error".
    """
    try:
        return _evaluate(runtime, instance, patch, options, model, ready)
    finally:
        if ready is not None:  # removed whether the grading used it or never got that far (no patch, a bad row)
            ready.remove(wait=False)


def _evaluate(
    runtime: Runtime,
    instance: Instance,
    patch: str | Patch | None,
    options: EvalOptions,
    model: str,
    ready: Container | None,
) -> Evaluation:
    start = time.monotonic()

    apply_log = ""
    network: str | None = None  # set once the container is started
    check: TamperCheck | None = None  # set once the patch is screened

    def verdict(grade: Grade, *, applied: bool, log: str = "", reason: str | None = None) -> Evaluation:
        outcome: Outcome = "resolved" if grade.resolved else "unresolved"
        seconds = time.monotonic() - start
        return Evaluation(
            instance.instance_id,
            model,
            outcome,
            grade,
            patch is None,
            applied,
            reason,
            seconds,
            log,
            apply_log,
            network=network,
            tamper=check,
        )

    if patch is None:
        return verdict(grading.unresolved("no patch (model_patch is null)"), applied=False)
    empty = not (patch.text if isinstance(patch, Patch) else patch).strip()
    if empty and not options.run_empty:
        # SWE-bench: an empty patch fails every apply command, so the instance is unresolved without running tests
        return verdict(grading.unresolved("empty patch"), applied=False)
    parser = options.parser or parser_for(instance.repo, instance.log_parser)
    model_patch, test_patch = Patch.of(patch), Patch.parse(instance.test_patch)  # once per evaluation
    script = instance_eval_script(instance, options.test_cmd, test_patch)
    container = ready or start_container(runtime, options)
    network = options.network
    try:
        sources = _base_sources(container, config_paths(model_patch, test_patch))
        test_cmd = options.test_cmd or instance.test_cmd or ""
        kept, check = screen_patch(
            model_patch, test_patch, options.tamper, repo=instance.repo, test_cmd=test_cmd, sources=sources
        )
        to_apply = kept.text
        if check.rejected:
            return verdict(grading.unresolved(check.reason()), applied=False)
        if not empty and not to_apply.strip():
            reason = f"every change was reverted as tampering ({', '.join(check.reverted)})"
            return verdict(grading.unresolved(reason), applied=False)
        # written by the first exec that runs (`exec_with_files`: one round trip to the engine, not two)
        files = {
            f"{EVAL_DIR}/model.patch": to_apply.encode(),
            f"{EVAL_DIR}/test.patch": instance.test_patch.encode(),
            f"{EVAL_DIR}/apply.sh": apply_script(f"{EVAL_DIR}/model.patch", kept.touched_paths()).encode(),
            f"{EVAL_DIR}/eval.sh": script.encode(),
        }
        log = ""
        if not empty:
            apply_argv = ["bash", f"{EVAL_DIR}/apply.sh"]
            applied = exec_with_files(container, files, apply_argv, timeout=min(APPLY_TIMEOUT, options.timeout))
            files = {}  # in the container now
            log = apply_log = _decode(applied.output)
            if applied.timed_out or applied.exit_code != 0:
                return verdict(grading.unresolved("the patch did not apply"), applied=False, log=log)
        eval_argv = ["bash", f"{EVAL_DIR}/eval.sh"]
        run = exec_with_files(container, files, eval_argv, timeout=options.timeout, output_cap=OUTPUT_CAP)
        log += _decode(run.output)
        if run.truncated:
            log += f"\npolar: test output cut at {OUTPUT_CAP // 2**20} MiB\n"
        if run.timed_out:
            log += f"\n{grading.TESTS_TIMEOUT} after {options.timeout:g} s\n"
            reason = f"the tests timed out after {options.timeout:g} s"
            return verdict(grading.unresolved(reason), applied=not empty, log=log)
        fault = None if run.truncated else _machinery_fault(log, run)
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
                network=options.network,
                tamper=check,
            )
        eval_type = instance.eval_type or "pass_and_fail"
        grade = grading.grade_log(log, instance.fail_to_pass, instance.pass_to_pass, parser, eval_type)
        return verdict(grade, applied=not empty, log=log)
    finally:
        if container is not ready:  # (`evaluate_instance` removes the one it was handed)
            container.remove(wait=False)  # the verdict is in: the removal goes on in the background


def _base_sources(container: Container, paths: Sequence[str]) -> dict[str, str]:
    """The base content of the config files the tamper check reads section by section (`tamper.config_paths`),
    read before the patch is applied; one that cannot be read is left out, and the check counts its changes."""
    sources: dict[str, str] = {}
    for path in paths:
        try:
            sources[path] = _decode(container.get_file(f"{WORKDIR}/{path}"))
        except (OSError, KeyError):
            continue
    return sources


def _machinery_fault(log: str, run: ExecResult) -> str | None:
    """Why a finished run says nothing about the patch: the runner did not start, or the markers are missing (how
    the script ended is part of the reason: the whole log is in the run's evaluation logs)."""
    code = runner_exit_code(log)
    if code in RUNNER_CANNOT_START:
        return f"the test runner could not start (exit {code}): check the image and the test command"
    if grading.failure_marker(log) is None and (
        grading.START_TEST_OUTPUT not in log or grading.END_TEST_OUTPUT not in log
    ):
        return f"the eval script ended without the test-output markers ({_how_it_ended(run)})"
    return None


def _how_it_ended(run: ExecResult) -> str:
    if run.oom_killed:
        return f"exit {run.exit_code}, a process was killed for memory"
    if run.exit_code is None:
        return "its output ended while it still ran"
    return f"exit {run.exit_code}, {run.output_size} bytes of output"


@dataclass(frozen=True, slots=True)
class EvalJob:
    instance: Instance
    patch: str | None
    options: EvalOptions
    model: str = ""


def run_job(runtime: Runtime, job: EvalJob, ready: Container | None = None) -> Evaluation:
    """`evaluate_instance`, with a failure of the evaluation itself recorded as outcome "error" instead of raised.

    An error is the machinery's, never the candidate's: it is tried again in a fresh container, up to
    ``options.error_retries`` times (a host out of memory, an engine hiccup, a container gone mid-run), and the last
    error stands only when every try failed. Its ``seconds`` counts every try. The patch is parsed once, for every
    try (`parsed`). ``ready``: the first try's container, started ahead (`start_container`); a retry starts its own."""
    start = time.monotonic()
    patch = parsed(job.patch)
    evaluation, retryable = _run_once(runtime, job, patch, ready)
    for retry in range(job.options.error_retries):
        if evaluation.outcome != "error" or not retryable:
            break
        logger.warning(
            "%s: evaluation error (%s); trying again in a fresh container (%d of %d)",
            job.instance.instance_id,
            evaluation.reason,
            retry + 1,
            job.options.error_retries,
        )
        evaluation, retryable = _run_once(runtime, job, patch)
    return replace(evaluation, seconds=time.monotonic() - start)


def parsed(patch: str | None) -> str | Patch | None:
    """``patch`` parsed (`diffs.Patch`), to hand to every try; one the parser refuses stays text, so that each try
    fails on it inside `evaluate_instance` as it would have (outcome "error")."""
    if patch is None:
        return None
    try:
        return Patch.parse(patch)
    except Exception:
        return patch


def _run_once(
    runtime: Runtime, job: EvalJob, patch: str | Patch | None, ready: Container | None = None
) -> tuple[Evaluation, bool]:
    """One try: its evaluation, and whether an error is worth another (a configuration error is not)."""
    start = time.monotonic()
    try:
        return evaluate_instance(runtime, job.instance, patch, job.options, job.model, ready), True
    except Exception as exc:  # one broken instance (missing image, engine hiccup) must not sink the batch
        reason = f"evaluation failed: {exc}"
        grade = grading.unresolved(reason)
        seconds = time.monotonic() - start
        failed = Evaluation(
            job.instance.instance_id, job.model, "error", grade, job.patch is None, reason=reason, seconds=seconds
        )
        return failed, not isinstance(exc, ConfigError)


def evaluate_many(
    runtime: Runtime, jobs: Sequence[EvalJob], *, workers: int = 1, on_done: Callable[[Evaluation], None] | None = None
) -> list[Evaluation]:
    """Run ``jobs`` on ``workers`` threads; results come back in job order."""
    return map_jobs(lambda job: run_job(runtime, job), jobs, workers=workers, on_done=on_done, thread_name="polar-eval")


JobT = TypeVar("JobT")
ResultT = TypeVar("ResultT")


def map_jobs(
    run: Callable[[JobT], ResultT],
    jobs: Sequence[JobT],
    *,
    workers: int,
    on_done: Callable[[ResultT], None] | None,
    thread_name: str,
) -> list[ResultT]:
    """``run`` over ``jobs`` on ``workers`` threads (in this one for a single worker), results in job order;
    ``on_done`` sees each result as it finishes, so a caller can report progress and save as it goes."""
    from concurrent.futures import ThreadPoolExecutor

    def one(job: JobT) -> ResultT:
        result = run(job)
        if on_done is not None:
            on_done(result)
        return result

    if workers <= 1:
        return [one(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_name) as pool:
        return list(pool.map(one, jobs))
