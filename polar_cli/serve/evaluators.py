"""A session's reward, by the task's evaluator. Each runs in a fresh container from the task's image, never in the
agent's, so only the patch counts (`swe.evaluate`).

    swebench           SWE-bench 5.0.2's grading of the instance (FAIL_TO_PASS / PASS_TO_PASS): 1.0 resolved, else 0.0
    command            the task's command after the patch, its log read by a SWE-bench parser: 1.0 when every test
                       in ``expected`` has its expected status, else 0.0 (a test absent from the log has none)
    harbor             a Harbor task's verifier after the patch (`harbor.verify.verify_patch`): its reward value,
                       every named value in the report (reward.txt / reward.json as Harbor reads them)
    session_completed  no container: 1.0 when the harness ended normally, else 0.0

Each is a function of the `Candidate` and its own settings, found by the request's evaluator ``type`` in `EVALUATORS`.
An evaluation that could not run (outcome ``error``) is the machinery's fault: the session is an error to retry, never
a reward of 0.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from polar_cli.config import EvalConfig
from polar_cli.runtime.base import Runtime
from polar_cli.serve.models import CommandEvaluator, HarborEvaluator, SessionCompletedEvaluator, SwebenchEvaluator
from polar_cli.serve.tasks import TaskPlan
from polar_cli.swe import grading
from polar_cli.swe.evaluate import EvalJob, EvalOptions, Evaluation, run_job
from polar_cli.swe.manifest import Instance


@dataclass(frozen=True, slots=True)
class Graded:
    reward: float
    report: dict[str, Any]
    # the container evaluation behind it (None for session_completed), whose logs the service keeps
    evaluation: Evaluation | None = None

    @property
    def failed(self) -> bool:
        """The evaluation itself could not run."""
        return self.evaluation is not None and self.evaluation.outcome == "error"


def command_script(command: str, workdir: str) -> str:
    """The command between SWE-bench's test-output markers (traced by ``set -x``), as a SWE-bench 5 row's script."""
    return "\n".join(
        [
            f"cd {workdir}",
            f": '{grading.START_TEST_OUTPUT}'",
            command,
            f": '{grading.END_TEST_OUTPUT}'",
        ]
    )


def command_instance(plan: TaskPlan, evaluator: CommandEvaluator) -> Instance:
    """The command as an instance whose FAIL_TO_PASS lists every expected test (so the log's status of each is read)."""
    return Instance(
        instance_id=plan.task_id,
        repo=plan.instance.repo if plan.instance is not None else "",
        base_commit=plan.instance.base_commit if plan.instance is not None else "",
        problem_statement="",
        patch="",
        test_patch="",
        fail_to_pass=tuple(evaluator.expected),
        pass_to_pass=(),
        eval_script=command_script(evaluator.command, plan.workdir),
        log_parser=evaluator.log_parser,
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    """What an evaluator grades: a session's patch on its task, whether its harness ended normally, and with what."""

    runtime: Runtime
    plan: TaskPlan
    patch: str
    ran_ok: bool
    settings: EvalConfig
    timeout: float
    model: str


def evaluate(
    runtime: Runtime, plan: TaskPlan, patch: str, ran_ok: bool, settings: EvalConfig, timeout: float, model: str
) -> Graded:
    """The task's evaluator on ``patch`` (``ran_ok``: the harness ended normally)."""
    grade: Callable[[Candidate, Any], Graded] = EVALUATORS[plan.evaluator.type]
    return grade(Candidate(runtime, plan, patch, ran_ok, settings, timeout, model), plan.evaluator)


def swebench(c: Candidate, evaluator: SwebenchEvaluator) -> Graded:
    assert c.plan.instance is not None  # the request model refuses swebench without an instance
    options = EvalOptions(
        image=c.plan.image,
        timeout=evaluator.timeout or c.timeout,
        network=evaluator.network or c.settings.network,
        tamper=evaluator.tamper or c.settings.tamper,
    )
    evaluation = run_job(c.runtime, EvalJob(c.plan.instance, c.patch, options, c.model))
    report = {"type": "swebench", **evaluation.to_dict()}
    report.pop("log_tail", None)
    return Graded(1.0 if evaluation.resolved else 0.0, report, evaluation)


def command(c: Candidate, evaluator: CommandEvaluator) -> Graded:
    options = EvalOptions(
        image=c.plan.image,
        timeout=evaluator.timeout or c.timeout,
        network=c.settings.network,
        tamper=c.settings.tamper,
        run_empty=True,
    )
    evaluation = run_job(c.runtime, EvalJob(command_instance(c.plan, evaluator), c.patch, options, c.model))
    observed = evaluation.grade.tests.observed if evaluation.grade.tests is not None else {}
    statuses = {test: (str(observed.get(test)) if observed.get(test) else None) for test in evaluator.expected}
    matched = evaluation.outcome != "error" and all(statuses[t] == s for t, s in evaluator.expected.items())
    report = {
        "type": "command",
        "outcome": evaluation.outcome,
        "reason": evaluation.reason or evaluation.grade.reason,
        "expected": dict(evaluator.expected),
        "observed": statuses,
        "patch_successfully_applied": evaluation.patch_applied,
        "seconds": round(evaluation.seconds, 3),
        "tamper": evaluation.tamper.to_dict() if evaluation.tamper else None,
    }
    return Graded(1.0 if matched else 0.0, report, evaluation)


def harbor(c: Candidate, evaluator: HarborEvaluator) -> Graded:
    """The Harbor task's verifier on the patch; its named rewards in the report."""
    from polar_cli.harbor.verify import verify_patch

    assert c.plan.harbor is not None  # the request model refuses harbor without harbor_task
    verdict = verify_patch(c.runtime, c.plan.harbor, c.plan.image, c.patch, c.model, evaluator.reward_threshold)
    evaluation = verdict.evaluation
    report = {
        "type": "harbor",
        "task_kind": "harbor",
        "outcome": evaluation.outcome,
        "resolved": evaluation.resolved,
        "reason": evaluation.reason,
        "rewards": dict(verdict.rewards) if verdict.rewards is not None else None,
        "seconds": round(evaluation.seconds, 3),
    }
    return Graded(verdict.reward if verdict.reward is not None else 0.0, report, evaluation)


def session_completed(c: Candidate, evaluator: SessionCompletedEvaluator) -> Graded:
    return Graded(1.0 if c.ran_ok else 0.0, {"type": "session_completed", "completed": c.ran_ok})


# an evaluator's ``type`` (`serve.models.Evaluator`) -> its grading; a new one: its model there and its line here
EVALUATORS: dict[str, Callable[[Candidate, Any], Graded]] = {
    "swebench": swebench,
    "command": command,
    "harbor": harbor,
    "session_completed": session_completed,
}
