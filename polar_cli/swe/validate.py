"""Gold-patch validation of a manifest: is every instance gradable the way its row claims?

An instance is valid when the gold patch resolves it and, without any patch, every FAIL_TO_PASS test fails and every
PASS_TO_PASS test is kept (the test patch is applied both times, as in evaluation). Anything else lists the reasons.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from polar_cli.runtime.base import Runtime
from polar_cli.swe.eval_logs import RunLogs
from polar_cli.swe.evaluate import EvalJob, EvalOptions, Evaluation, map_jobs, run_job
from polar_cli.swe.manifest import Instance

Status = Literal["valid", "broken", "error"]
_SHOWN = 5


@dataclass(frozen=True, slots=True)
class Validation:
    instance_id: str
    status: Status
    reasons: tuple[str, ...]
    gold: Evaluation
    without_fix: Evaluation

    def to_dict(self, logs: RunLogs | None = None) -> dict[str, Any]:
        """The report entry; with ``logs``, each evaluation's entry links its log (``log_path``)."""

        def entry(evaluation: Evaluation) -> dict[str, Any]:
            return evaluation.to_dict() if logs is None else logs.entry(evaluation)

        return {
            "instance_id": self.instance_id,
            "status": self.status,
            "reasons": list(self.reasons),
            "gold": entry(self.gold),
            "without_fix": entry(self.without_fix),
        }

    def write_logs(self, logs: RunLogs) -> None:
        """Both evaluations' logs (models "gold" and "empty") under ``logs``; a failed write is OSError."""
        logs.write(self.gold)
        logs.write(self.without_fix)


def _listing(tests: Sequence[str]) -> str:
    shown = ", ".join(tests[:_SHOWN])
    return shown + (f" (+{len(tests) - _SHOWN} more)" if len(tests) > _SHOWN else "")


def judge(instance: Instance, gold: Evaluation, without_fix: Evaluation) -> Validation:
    """The verdict from the two evaluations (pure)."""
    errors = [e.reason or "evaluation failed" for e in (gold, without_fix) if e.outcome == "error"]
    if errors:
        return Validation(instance.instance_id, "error", tuple(errors), gold, without_fix)
    reasons: list[str] = []
    if not instance.fail_to_pass:
        reasons.append("FAIL_TO_PASS is empty: nothing shows the bug")
    if not gold.resolved:
        tests = gold.grade.tests
        if tests is None:
            reasons.append(f"the gold patch does not resolve it: {gold.grade.reason}")
        else:
            failing = [*tests.fail_to_pass_failure, *tests.pass_to_pass_failure]
            reasons.append(f"the gold patch does not resolve it; failing: {_listing(failing)}")
    before = without_fix.grade.tests
    if before is None:
        reasons.append(f"without the fix the tests do not run: {without_fix.grade.reason}")
    else:
        if before.fail_to_pass_success:
            reasons.append(f"FAIL_TO_PASS passes without the fix: {_listing(before.fail_to_pass_success)}")
        if before.pass_to_pass_failure:
            reasons.append(f"PASS_TO_PASS fails without the fix: {_listing(before.pass_to_pass_failure)}")
    if without_fix.resolved:
        reasons.append("resolved without any patch")
    return Validation(instance.instance_id, "broken" if reasons else "valid", tuple(reasons), gold, without_fix)


def validate_instance(runtime: Runtime, instance: Instance, options: EvalOptions) -> Validation:
    """Evaluate the gold patch and the empty patch (tests run anyway) and judge the pair."""
    gold = run_job(runtime, EvalJob(instance, instance.patch, options, "gold"))
    without_fix = run_job(runtime, EvalJob(instance, "", replace(options, run_empty=True), "empty"))
    return judge(instance, gold, without_fix)


def validate_many(
    runtime: Runtime,
    jobs: Sequence[tuple[Instance, EvalOptions]],
    *,
    workers: int = 1,
    on_done: Callable[[Validation], None] | None = None,
) -> list[Validation]:
    """Validate each instance; results in job order."""
    return map_jobs(
        lambda job: validate_instance(runtime, *job),
        jobs,
        workers=workers,
        on_done=on_done,
        thread_name="polar-validate",
    )
