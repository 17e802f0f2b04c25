"""The node's stage functions for `polar serve`: one sample of a task as a harness session in Docker, graded.

The same steps as a generate run's (`generate.stages`): INIT opens the session at the gateway (with the sample's
sampling fields, its seed among them) and prepares the container; RUN runs the harness; POSTRUN takes the patch and
the harness's logs, removes the container, reads the capture back, builds the trajectories with the task's builder
and grades the patch with the task's evaluator (`serve.evaluators`). The session's status uses generate's vocabulary
(`generate.rows.status_of`), mapped to the four a trainer sees (`serve.results`): the machinery's failures are
``error``, running out of time is ``timeout``, anything else the harness did is ``completed`` and graded. A session
whose task was cancelled (or cut by early stop) is not graded.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polar_cli.capture import CaptureRecord
from polar_cli.config import EvalConfig
from polar_cli.egress.policy import Allowlist
from polar_cli.egress.sessions import EgressRows, SessionEgress
from polar_cli.gateway.budget import BUDGET_KIND
from polar_cli.generate.rows import INFRA, SessionFacts, status_of, verdict
from polar_cli.generate.session_logs import keep_session_logs, log_excerpt, run_logs
from polar_cli.harness.base import Wiring
from polar_cli.harness.session import HarnessRun, Prepared, SessionSpec
from polar_cli.node.gateway import NodeGateway
from polar_cli.node.pools import Job, RunEnd, Timings
from polar_cli.node.session_stages import SessionStages
from polar_cli.node.session_steps import SessionSteps, in_thread
from polar_cli.runtime.base import GATEWAY_ONLY
from polar_cli.serve.evaluators import Graded, evaluate
from polar_cli.serve.results import SessionOutput
from polar_cli.serve.tasks import TaskPlan
from polar_cli.swe.manifest import Instance
from polar_cli.tasks.images import Images
from polar_cli.trajectory import Build, build_traces

log = logging.getLogger("polar.serve")


@dataclass(frozen=True, slots=True)
class SessionJob:
    """Sample ``index`` of a task, its ``attempt``-th try (a machinery error is tried again)."""

    plan: TaskPlan
    index: int
    attempt: int = 1

    @property
    def task_id(self) -> str:
        return self.plan.task_id

    @property
    def key(self) -> str:
        return session_job_key(self.plan.task_id, self.index)

    def new_session_id(self) -> str:
        return f"{self.plan.task_id}.{self.index}.{self.attempt}.{secrets.token_hex(3)}"


def session_job_key(task_id: str, index: int) -> str:
    return f"{task_id}#{index}"


@dataclass(slots=True)
class ServeSession:
    session_id: str
    key: str
    prepared: Prepared


def stand_in_instance(plan: TaskPlan) -> Instance:
    """What generate's status rules read of an instance, for a task that has none."""
    return Instance(plan.task_id, "", "", plan.instruction, "", "", (), ())


def weight_versions(records: Sequence[CaptureRecord], seqs: Sequence[int] | None = None) -> list[str]:
    wanted = None if seqs is None else set(seqs)
    found = {
        str(v)
        for r in records
        if (wanted is None or r.seq in wanted) and (v := getattr(r, "weight_version", None)) is not None
    }
    return sorted(found)


class ServeStages(SessionStages):
    """The `node.pools.Stages` of the rollout service."""

    def __init__(
        self,
        *,
        steps: SessionSteps,
        gateway: NodeGateway,
        state_dir: Path,
        eval_settings: EvalConfig,
        eval_timeout: float,
        build_images: bool,
        name: str,
        eot_token_id: int | None,
        cancelled: Callable[[SessionJob], str | None],
        egress: Allowlist | None = None,
    ) -> None:
        # the service's runtime.egress (a task cannot add hosts): gateway-only sessions' proxy sockets and logs
        super().__init__(steps, gateway, SessionEgress(egress), build_images)
        self.state_dir = state_dir
        self.eval_settings = eval_settings
        self.eval_timeout = eval_timeout
        self.eot_token_id = eot_token_id
        self.cancelled = cancelled
        self.eval_logs = run_logs(state_dir, name)

    # ---- what INIT needs once per image ---------------------------------------------------------------------------

    async def ready_image(self, plan: TaskPlan) -> None:
        """The task's image present: its kind's (built when it can be, as generate builds it) unless the task names an
        image of its own, which is pulled."""
        from polar_cli.serve.models import InstanceRef

        instance, ref = plan.instance, plan.request.instance
        if plan.request.runtime.image is not None or instance is None:
            return await self.image(plan.image, None)
        manifest = ref.manifest if isinstance(ref, InstanceRef) else None
        images = Images(self.runtime, self.build_images, log.info, manifest)
        await self.image(plan.image, lambda: type(plan.kind).ready_images([(instance, plan.kind)], images))

    # ---- the stages ---------------------------------------------------------------------------------------------

    async def init(self, job: Job[SessionJob], deadline: float) -> ServeSession:
        sj = job.payload
        plan = sj.plan
        bundle = await self.bundle(plan.harness)
        await self.ready_image(plan)
        session_id = sj.new_session_id()
        # what the scripted engines know: the reference patch, a Harbor task's oracle (`tasks.kinds`)
        gold = plan.kind.scripted(plan.instance, plan.workdir) if plan.instance else None
        sampling = plan.request.sampling.for_sample(sj.index)
        model = plan.request.harness_spec().model
        key = self.gateway.open_session(
            session_id,
            gold,
            sampling=sampling or None,
            token_in=plan.token_in,
            token_budget=plan.request.max_sampled_tokens,
        )

        async def spec() -> SessionSpec:
            sandbox = await self.sandbox() if plan.network == GATEWAY_ONLY else None
            made = SessionSpec(
                session_id=session_id,
                harness=plan.harness,
                image=plan.image,
                instruction=plan.instruction,
                bundle=bundle,
                base_commit=(plan.instance.base_commit or None) if plan.instance else None,
                workdir=plan.workdir,
                timeout=plan.timeout,
                network=plan.network,
                gateway_socket=sandbox[0] if sandbox else None,
                relay=sandbox[1] if sandbox else None,
                cpus=plan.cpus,
                memory_bytes=plan.memory_mb * 1024 * 1024 if plan.memory_mb else None,
                output_limit=plan.output_limit_mb * 1024 * 1024 if plan.output_limit_mb else None,
                labels={"polar.task": plan.task_id, "polar.key": sj.key},
                sandbox=plan.sandbox,
            )
            return await self.egress.open(made) if plan.network == GATEWAY_ONLY else made

        prepared = await self.prepare(session_id, key, spec, Wiring(self.gateway.url, key, model))
        return ServeSession(session_id, key, prepared)

    async def run(self, job: Job[SessionJob], session: ServeSession, deadline: float) -> HarnessRun:
        # the deadline is on the gate's credited clock (the pools' too): time paused for a weight sync is not counted
        clock = self.gateway.gate.credited_clock
        return await self.steps.run(session.prepared, deadline, job.payload.plan.agent_timeout, clock)

    async def postrun(
        self, job: Job[SessionJob], session: ServeSession | None, end: RunEnd, timings: Timings
    ) -> SessionOutput:
        sj = job.payload
        plan = sj.plan
        harness_run = end.value if isinstance(end.value, HarnessRun) else None
        collected = None
        records: list[CaptureRecord] = []
        session_id = session.session_id if session is not None else ""
        egress: EgressRows | None = None
        if session is not None:
            artifacts = self.state_dir / "artifacts" / session_id
            collected, records, egress = await self.conclude(session, artifacts, harness_run)
        build = await in_thread(self.executor, lambda: self._build(plan, records))
        cancelled = self.cancelled(sj)
        graded: Graded | None = None
        log_path = None
        if cancelled is None and collected is not None and not collected.error and harness_run is not None:
            patch, ran_ok = collected.patch, harness_run.status == "ok"
            graded = await in_thread(
                self.executor,
                lambda: evaluate(self.runtime, plan, patch, ran_ok, self.eval_settings, self.eval_timeout, self.model),
            )
            if graded.evaluation is not None:
                evaluation = graded.evaluation
                log_path = await in_thread(self.executor, lambda: self._write_logs(evaluation, session_id))
        facts = SessionFacts(
            key=sj.key,
            session_id=session_id,
            instance=plan.instance or stand_in_instance(plan),
            harness=plan.harness.name,
            attempt=sj.attempt,
            model=self.model,
            end=end,
            harness_run=harness_run,
            collected=collected,
            records=records,
            build=build,
            evaluation=graded.evaluation if graded is not None else None,
        )
        status, detail = status_of(facts)
        reason: str | None
        if cancelled is not None:
            kind, reason = "cancelled", f"cancelled: {cancelled}"
        elif status in INFRA:
            kind, reason = "error", f"{status.lower()}: {detail}"
        elif status in ("TIMEOUT", "INIT_TIMEOUT"):
            kind, reason = "timeout", f"timeout: {detail}"
        elif status != "OK":
            kind, reason = "completed", f"{status.lower()}: {detail}"
        else:
            kind, reason = "completed", _why_not_rewarded(facts, graded)
        if any(r.error_kind == BUDGET_KIND for r in records):
            reason = f"token_budget: the session used up its {plan.request.max_sampled_tokens} sampled tokens" + (
                f"; {reason}" if reason else ""
            )
        report = dict(graded.report) if graded is not None else None
        if report is not None and graded is not None and graded.evaluation is not None:
            report["log_path"] = log_path
            report["log_excerpt"] = log_excerpt(graded.evaluation)
        return SessionOutput(
            session_id=session_id,
            status=kind,  # type: ignore[arg-type]
            reason=reason,
            reported_reward=graded.reward if graded is not None else None,
            report=report,
            traces=[
                {
                    **t.to_row(),
                    "lineage": t.metadata.get("lineage"),
                    "weight_versions": weight_versions(records, t.seqs),
                }
                for t in build.traces
            ],
            patch=collected.patch if collected is not None else "",
            exit_code=harness_run.exit_code if harness_run is not None else None,
            timings={
                **timings.to_dict(),
                "eval": round(graded.evaluation.seconds, 3) if graded and graded.evaluation else 0.0,
            },
            weight_versions=weight_versions(records),
            egress=egress,
            stats=_stats(records, build),
        )

    def _build(self, plan: TaskPlan, records: list[CaptureRecord]) -> Build:
        return build_traces(records, plan.strategy, self.eot_token_id, plan.drift)  # type: ignore[arg-type]

    def _write_logs(self, evaluation: Any, session_id: str) -> str | None:
        return keep_session_logs(self.eval_logs, evaluation, session_id)


def _why_not_rewarded(facts: SessionFacts, graded: Graded | None) -> str | None:
    """For a session that ran normally: why its reward is 0 (generate's reasons: no_patch, unresolved, tamper)."""
    if graded is None or graded.reward > 0:
        return None
    report = graded.report
    if report.get("type") == "swebench":
        return verdict(facts)[2]
    if report.get("type") == "command":
        expected, observed = report.get("expected") or {}, report.get("observed") or {}
        missed = [
            f"{t} (expected {s}, saw {observed.get(t) or 'nothing'})"
            for t, s in expected.items()
            if observed.get(t) != s
        ]
        return f"unresolved: {'; '.join(missed[:5]) or report.get('reason') or 'the tests did not run'}"
    return "unresolved: the harness did not end normally"


def _stats(records: Sequence[CaptureRecord], build: Build) -> dict[str, Any]:
    ok = [r for r in records if r.status == "ok"]
    merge = build.stats.counts()
    return {
        "model_calls": len(records),
        "model_calls_ok": len(ok),
        "prompt_tokens": sum(len(r.prompt_ids) for r in ok),
        "completion_tokens": sum(len(r.response_ids) for r in ok),
        "trainable_tokens": sum(sum(t.loss_mask) for t in build.traces),
        "traces": len(build.traces),
        "token_in_calls": sum(r.prompt_mode == "token_in" for r in ok),
        "merge_rate": merge.get("merge_rate"),
        "compactions": merge.get("compactions", 0),
        "subagents": merge.get("subagents", 0),
        "token_budget_exhausted": any(r.error_kind == BUDGET_KIND for r in records),
    }
