"""A session's reward, by the task's evaluator. Each runs in a fresh container from the task's image, never in the
agent's, so only the patch counts (`swe.evaluate`).

    swebench           SWE-bench 5.0.2's grading of the instance (FAIL_TO_PASS / PASS_TO_PASS): 1.0 resolved, else 0.0
    command            the task's command after the patch, its log read by a SWE-bench parser: 1.0 when every test
                       in ``expected`` has its expected status, else 0.0 (a test absent from the log has none)
    harbor             a Harbor task's verifier after the patch (`harbor.verify.verify_patch`): its reward value,
                       every named value in the report (reward.txt / reward.json as Harbor reads them)
    session_completed  no container: 1.0 when the harness ended normally, else 0.0

An evaluation that could not run (outcome ``error``) is the machinery's fault: the session is an error to retry, never
a reward of 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from polar_cli.config import EvalConfig
from polar_cli.runtime.base import Runtime
from polar_cli.serve.models import CommandEvaluator, HarborEvaluator, SwebenchEvaluator
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


def evaluate(
    runtime: Runtime, plan: TaskPlan, patch: str, ran_ok: bool, settings: EvalConfig, timeout: float, model: str
) -> Graded:
    """The task's evaluator on ``patch`` (``ran_ok``: the harness ended normally)."""
    evaluator = plan.evaluator
    if isinstance(evaluator, SwebenchEvaluator):
        assert plan.instance is not None  # the request model refuses swebench without an instance
        options = EvalOptions(
            image=plan.image,
            timeout=evaluator.timeout or timeout,
            network=evaluator.network or settings.network,
            tamper=evaluator.tamper or settings.tamper,
        )
        evaluation = run_job(runtime, EvalJob(plan.instance, patch, options, model))
        report = {"type": "swebench", **evaluation.to_dict()}
        report.pop("log_tail", None)
        return Graded(1.0 if evaluation.resolved else 0.0, report, evaluation)
    if isinstance(evaluator, CommandEvaluator):
        options = EvalOptions(
            image=plan.image,
            timeout=evaluator.timeout or timeout,
            network=settings.network,
            tamper=settings.tamper,
            run_empty=True,
        )
        evaluation = run_job(runtime, EvalJob(command_instance(plan, evaluator), patch, options, model))
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
    if isinstance(evaluator, HarborEvaluator):
        return harbor_graded(runtime, plan, evaluator, patch, settings, model)
    return Graded(1.0 if ran_ok else 0.0, {"type": "session_completed", "completed": ran_ok})


def harbor_graded(
    runtime: Runtime, plan: TaskPlan, evaluator: HarborEvaluator, patch: str, settings: EvalConfig, model: str
) -> Graded:
    """The Harbor task's verifier on ``patch``; its named rewards in the report."""
    from polar_cli.harbor.verify import verify_patch

    assert plan.harbor is not None  # the request model refuses harbor without harbor_task
    verdict = verify_patch(runtime, plan.harbor, plan.image, patch, model, evaluator.reward_threshold)
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
