"""`polar generate`'s stage functions for the node's pools: a harness session in Docker, graded, made into a row.

INIT opens the session at the gateway (its key is the harness's API key; a scripted engine learns the instance it
answers for) and prepares the container (``runtime.network: gateway-only``: the first INIT also opens the gateway's
Unix socket and finds the relay, `SessionSpec.gateway_only`). RUN runs the harness. POSTRUN takes the patch and the
harness's logs, removes the container, closes the session, reads its capture records back, builds its trajectories,
grades the patch in a fresh container and writes the evaluation's whole logs into the run directory (`session_logs`).
That fresh container is started at the end of INIT, in the background (`TaskKind.grader`, `PooledSession.grader`), so
it is up long before POSTRUN wants it; POSTRUN takes it, or drops it when there is nothing to grade, and a session
discarded before POSTRUN drops it too. The row itself is written by the caller (`run.Generation`), once the timings
are final.

Each plan holds its task's kind (`tasks.kinds`), which says what the task sets of its session, what the scripted
engines know of it, and how it is graded: a SWE instance after the container is removed, in a fresh one; a Harbor
task before, in the agent's own container (its instruction.md byte for byte, its workdir and limits, its oracle).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from polar_cli.capture import CaptureRecord
from polar_cli.config import Recipe
from polar_cli.egress.sessions import EgressRows, SessionEgress
from polar_cli.generate.rows import SessionFacts, tests_verdict
from polar_cli.generate.session_logs import keep_session_logs, run_logs
from polar_cli.harbor.tasks import HarborTask
from polar_cli.harness.base import HarnessAdapter, Wiring
from polar_cli.harness.session import Collected, HarnessRun, Prepared, SessionSpec
from polar_cli.inference.gold import Task
from polar_cli.judge.client import RECORD_NAME, Judge, JudgeError
from polar_cli.node.gateway import NodeGateway
from polar_cli.node.pools import Job, RunEnd, Timings
from polar_cli.node.session_stages import OpenSession, SessionStages
from polar_cli.node.session_steps import Ahead, SessionSteps, in_thread
from polar_cli.runtime.base import GATEWAY_ONLY, Container
from polar_cli.swe.evaluate import Evaluation
from polar_cli.swe.manifest import Instance
from polar_cli.tasks.kinds import SWE, Grading, InSession, TaskKind, kind_of
from polar_cli.trajectory import Build, build_traces

log = logging.getLogger("polar.generate")
# seconds a session gets beyond its task's own agent timeout, for INIT (container start, git, harness config)
TASK_INIT_ALLOWANCE = 120.0


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """One (instance, harness, attempt) to run."""

    key: str
    instance: Instance
    harness: HarnessAdapter
    attempt: int
    image: str
    # what the runtime mounts for the harness's bundle (`session.mount_bundle`); None: nothing
    bundle: str | None
    # what kind of task the instance is (`tasks.kinds`): a SWE instance unless the manifest made it another
    kind: TaskKind = SWE

    def session_timeout(self, recipe: Recipe) -> float:
        """The session's time limit: the recipe's, raised to fit the task's own agent timeout (plus INIT's)."""
        agent = self.kind.shape().agent_timeout
        return max(recipe.timeouts.session, agent + TASK_INIT_ALLOWANCE) if agent else recipe.timeouts.session

    def agent_timeout(self, recipe: Recipe) -> float | None:
        """The harness's time limit: the task's own (a Harbor task's ``[agent].timeout_sec``), else the recipe's."""
        return self.kind.shape().agent_timeout or recipe.timeouts.agent

    def new_session_id(self) -> str:
        # unique per try: a resumed run must never append to the capture file of an interrupted try
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.instance.instance_id)
        return f"{safe}.{self.harness.name}.{self.attempt}.{secrets.token_hex(3)}"


@dataclass(slots=True)
class PooledSession:
    """A session between INIT and POSTRUN: its gateway key, its prepared container, and the grading container its
    kind wants after the session, starting or started (`GenerateStages.init`; None: none was started)."""

    session_id: str
    key: str
    prepared: Prepared
    grader: Ahead[Container] | None = None


class GenerateStages(SessionStages):
    """The `node.pools.Stages` of a generate run."""

    def __init__(
        self, recipe: Recipe, steps: SessionSteps, gateway: NodeGateway, run_dir: Path, eot_token_id: int | None
    ) -> None:
        # runtime.egress: each session's egress proxy socket and its log (`egress.sessions`); a task's own allowed
        # hosts go to `SessionEgress.open`
        egress = SessionEgress(recipe.runtime.egress.allowlist())
        super().__init__(steps, gateway, egress, recipe.runtime.build_images)
        self.recipe = recipe
        self.run_dir = run_dir
        self.eot_token_id = recipe.builder.eot_token_id if recipe.builder.eot_token_id is not None else eot_token_id
        self.eval_logs = run_logs(run_dir, recipe.name)
        self.grading = Grading(self.runtime, recipe, self.model)
        # told each session's key as its INIT starts (`watches.Requeue` notes the outage epoch)
        self.on_init: Callable[[str], None] | None = None
        # the recipe's judge (docs/judge.md): scores sessions in POSTRUN, its calls never through the gateway
        self.judge = Judge.open(recipe.judge, gateway.engine.upstream, self.model) if recipe.judge else None

    async def init(self, job: Job[SessionPlan], deadline: float) -> PooledSession:
        plan = job.payload
        if self.on_init is not None:
            self.on_init(job.key)
        session_id = plan.new_session_id()
        task = self._task(plan)
        key = self.gateway.open_session(session_id, task)

        async def spec() -> SessionSpec:
            sandbox = await self.sandbox() if self.recipe.runtime.network == GATEWAY_ONLY else None
            return await self.egress.open(self._spec(plan, session_id, sandbox), plan.kind.shape().allowed_hosts)

        prepared = await self.prepare(session_id, key, spec, Wiring(self.gateway.url, key))
        # starting a container takes a quarter of a second: begun now, it is up before the harness's run ends. Nothing
        # is awaited between here and the return, so no cancellation comes between starting it and handing it to the
        # session, which drops it if it is not used (`postrun`, `discard`)
        grader = Ahead(self.executor, lambda: plan.kind.grader(self.grading, plan.image), _drop)
        return PooledSession(session_id, key, prepared, grader)

    def _task(self, plan: SessionPlan) -> Task:
        """What the scripted engines know: the reference patch, or a Harbor task's oracle."""
        return plan.kind.scripted(plan.instance, plan.kind.shape().workdir or self.recipe.runtime.workdir)

    def _spec(self, plan: SessionPlan, session_id: str, sandbox: tuple[str, str] | None = None) -> SessionSpec:
        r = self.recipe.runtime
        shape = plan.kind.shape()
        memory_mb = shape.memory_mb or r.memory_mb
        return SessionSpec(
            session_id=session_id,
            harness=plan.harness,
            image=plan.image,
            instruction=shape.instruction if shape.instruction is not None else self._instruction(plan.instance),
            bundle=plan.bundle,
            base_commit=plan.instance.base_commit or None,
            workdir=shape.workdir or r.workdir,
            timeout=plan.session_timeout(self.recipe),
            network=r.network,
            gateway_socket=sandbox[0] if sandbox else None,
            relay=sandbox[1] if sandbox else None,
            cpus=shape.cpus or r.cpus,
            memory_bytes=memory_mb * 1024 * 1024 if memory_mb else None,
            output_limit=r.output_limit_mb * 1024 * 1024 if r.output_limit_mb else None,
            labels={"polar.key": plan.key},
            strip_history=r.strip_history and shape.own_repository,
            sandbox=r.sandbox(),
        )

    def _instruction(self, instance: Instance) -> str:
        return self.recipe.instruction.format(
            problem_statement=instance.problem_statement,
            repo=instance.repo,
            instance_id=instance.instance_id,
            workdir=self.recipe.runtime.workdir,
        )

    async def run(self, job: Job[SessionPlan], session: PooledSession, deadline: float) -> HarnessRun:
        return await self.steps.run(session.prepared, deadline, job.payload.agent_timeout(self.recipe))

    async def postrun(
        self, job: Job[SessionPlan], session: PooledSession | None, end: RunEnd, timings: Timings
    ) -> SessionFacts:
        plan = job.payload
        harness_run = end.value if isinstance(end.value, HarnessRun) else None
        collected = None
        records: list[CaptureRecord] = []
        session_id = session.session_id if session is not None else ""
        egress: EgressRows | None = None
        verdict: InSession | None = None
        grader = session.grader if session is not None else None  # started at INIT (`init`)
        eval_seconds = 0.0
        try:
            if session is not None:
                artifacts = self.run_dir / "artifacts" / session_id if self.recipe.output.keep_artifacts else None
                if harness_run is not None:  # a kind that grades in the agent's container does so before it goes
                    start = time.monotonic()
                    verdict = await self._grade_in_session(plan.kind, session)
                    eval_seconds = time.monotonic() - start
                collected, records, egress = await self.conclude(session, artifacts, harness_run)
                if verdict is not None and verdict.patch is not None and not collected.error:
                    collected = Collected(verdict.patch, collected.artifacts)
            build = await in_thread(self.executor, lambda: self._build(records))
            evaluation, log_path = None, None
            if collected is not None and not collected.error and harness_run is not None:
                if verdict is not None:
                    evaluation = verdict.evaluation
                else:
                    start = time.monotonic()
                    ready = await grader.take() if grader is not None else None
                    evaluation = await in_thread(self.executor, lambda: self._evaluate(plan, collected.patch, ready))
                    eval_seconds = time.monotonic() - start
        finally:
            if grader is not None:
                grader.release()  # not taken: no run, no patch to grade, graded in the session, or a step raised
        if evaluation is not None:
            graded = evaluation
            log_path = await in_thread(self.executor, lambda: self._write_logs(graded, session_id))
        facts = SessionFacts(
            key=plan.key,
            session_id=session_id,
            instance=plan.instance,
            harness=plan.harness.name,
            attempt=plan.attempt,
            model=self.model,
            end=end,
            harness_run=harness_run,
            collected=collected,
            records=records,
            build=build,
            evaluation=evaluation,
            eval_seconds=eval_seconds,
            eval_log_path=log_path,
            stripped=session.prepared.stripped if session is not None else None,
            egress=egress,
            task_kind=plan.kind.name,
            rewards=verdict.result.rewards if verdict is not None else None,
            reward=verdict.result.reward if verdict is not None else None,
        )
        return await self._judged(facts)

    async def discard(self, job: object, session: OpenSession) -> None:
        """The session dropped before POSTRUN (a cancelled run), with the grading container started at its INIT."""
        try:
            await super().discard(job, session)
        finally:
            if isinstance(session, PooledSession) and session.grader is not None:
                session.grader.release()

    async def _grade_in_session(self, kind: TaskKind, session: PooledSession) -> InSession | None:
        """The grade a kind takes before the container goes (a Harbor task: the agent's changes, then its tests)."""
        return await in_thread(self.executor, lambda: kind.grade_in_session(self.grading, session.prepared))

    async def _judged(self, facts: SessionFacts) -> SessionFacts:
        """The judge's scores for a session its policy wants judged; a judge fault is the session's machinery error
        (``judge_error``, retried), never a reward of 0. Its calls go to ``artifacts/<session>/judge.jsonl``."""
        kind, _status, reason = tests_verdict(facts)
        if self.judge is None or not facts.session_id or not self.judge.policy.wants(kind, reason):
            return facts
        name = f"artifacts/{facts.session_id}/{RECORD_NAME}"
        try:
            result = await self.judge.score(facts.build.traces, facts.records, self.run_dir / name, name)
        except JudgeError as exc:
            log.warning("session %s: the judge failed: %s", facts.session_id, exc)
            return replace(facts, judge_error=str(exc))
        return replace(facts, judge=result)

    def failed(
        self, job: Job[SessionPlan], session: PooledSession | None, end: RunEnd, timings: Timings, failure: str
    ) -> SessionFacts:
        """The facts of a session whose POSTRUN or row writing raised (`node.pools` Rule 5): a ``postrun_error`` row,
        which the next run (or the outage rules) retries, its reason naming the stage and the exception."""
        plan = job.payload
        if end.reason != "ok":  # what ended the session before, kept in the reason
            failure = f"{failure} (after {end.reason}: {end.error})"
        harness_run = end.value if isinstance(end.value, HarnessRun) else None
        return SessionFacts(
            key=plan.key,
            session_id=session.session_id if session is not None else "",
            instance=plan.instance,
            harness=plan.harness.name,
            attempt=plan.attempt,
            model=self.model,
            end=RunEnd("ok", harness_run),  # so that the row's status is POSTRUN_ERROR, whatever RUN said
            harness_run=harness_run,
            collected=Collected("", (), error=failure),
            task_kind=plan.kind.name,
        )

    def _write_logs(self, evaluation: Evaluation, session_id: str) -> str | None:
        return keep_session_logs(self.eval_logs, evaluation, session_id)

    def _build(self, records: list[CaptureRecord]) -> Build:
        return build_traces(records, self.recipe.builder.strategy, self.eot_token_id, self.recipe.builder.drift)

    def _evaluate(self, plan: SessionPlan, patch: str, ready: Container | None = None) -> Evaluation | None:
        return plan.kind.grade_after(self.grading, plan.instance, plan.image, patch, ready)


def _drop(container: Container) -> None:
    container.remove(wait=False)


def plan_sessions(
    instances: list[Instance],
    harnesses: list[HarnessAdapter],
    attempts: int,
    image_of: Callable[[Instance], str],
    bundles: Mapping[str, str | None],
    harbor: Mapping[str, HarborTask] | None = None,
) -> list[SessionPlan]:
    """Every (instance, harness, attempt), attempt-major: an interrupted run has covered instances evenly."""
    from polar_cli.generate.state import session_key

    tasks = harbor or {}
    return [
        SessionPlan(
            session_key(i.instance_id, h.name, a),
            i,
            h,
            a,
            image_of(i),
            bundles[h.name],
            kind_of(tasks.get(i.instance_id)),
        )
        for a in range(1, attempts + 1)
        for i in instances
        for h in harnesses
    ]
