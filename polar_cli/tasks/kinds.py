"""The kinds of task a session works on, behind the one interface the stages call (`TaskKind`).

A kind says what it sets of its session (`SessionShape`: its instruction, its workdir, its limits, the hosts it may
reach), what the scripted engines know of it (gold's reference patch, a Harbor task's oracle), and how a session of
it is graded: in the agent's own container before it is removed (a Harbor verifier: `grade_in_session`), or after,
in a fresh container from the task's image (SWE-bench's tests: `grade_after`). `generate.stages` and `serve.stages`
never ask which kind they hold.

Adding a kind: a class here with these methods, and its line in `kind_of`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from polar_cli.harbor.tasks import HarborTask
from polar_cli.inference.gold import Task
from polar_cli.swe.evaluate import EvalJob, EvalOptions, Evaluation, run_job
from polar_cli.swe.manifest import Instance

if TYPE_CHECKING:
    from polar_cli.config import Recipe
    from polar_cli.harbor.verify import Verdict as HarborVerdict
    from polar_cli.harness.session import Prepared
    from polar_cli.runtime.base import Runtime


@dataclass(frozen=True, slots=True)
class SessionShape:
    """What a task sets of its session; None: the recipe's (or the service's) own setting."""

    instruction: str | None = None
    workdir: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    agent_timeout: float | None = None
    allowed_hosts: tuple[str, ...] = ()
    # the workdir is a repository of the task's own, whose history may be stripped (a Harbor task's is not: git is
    # set up there only to take the agent's changes)
    own_repository: bool = True


@dataclass(frozen=True, slots=True)
class InSession:
    """A grade taken in the agent's container: the verifier's result, and the agent's changes taken before it ran
    (None: they could not be; `SessionSteps.conclude` then tries again and says why)."""

    result: HarborVerdict
    patch: str | None

    @property
    def evaluation(self) -> Evaluation:
        return self.result.evaluation


class TaskKind(Protocol):
    name: str  # the row's ``task_kind``

    def shape(self) -> SessionShape: ...

    def scripted(self, instance: Instance, workdir: str) -> Task:
        """What the scripted engines (gold, noop) know of the task."""
        ...

    def grade_in_session(self, prepared: Prepared, model: str, recipe: Recipe) -> InSession | None:
        """The grade taken before the agent's container goes (None: this kind grades after)."""
        ...

    def grade_after(
        self, runtime: Runtime, instance: Instance, image: str, patch: str, model: str, recipe: Recipe
    ) -> Evaluation | None:
        """The grade of the agent's patch in a fresh container (None: this kind graded in the session)."""
        ...


@dataclass(frozen=True, slots=True)
class SweTask:
    """A SWE-Gym / SWE-bench instance: the recipe's instruction and workdir, SWE-bench's grading after the session."""

    name = "swe"

    def shape(self) -> SessionShape:
        return SessionShape()

    def scripted(self, instance: Instance, workdir: str) -> Task:
        return Task(instance.instance_id, instance.patch, workdir)

    def grade_in_session(self, prepared: Prepared, model: str, recipe: Recipe) -> InSession | None:
        return None

    def grade_after(
        self, runtime: Runtime, instance: Instance, image: str, patch: str, model: str, recipe: Recipe
    ) -> Evaluation | None:
        e = recipe.eval
        options = EvalOptions(image=image, timeout=recipe.timeouts.eval, network=e.network, tamper=e.tamper)
        return run_job(runtime, EvalJob(instance, patch, options, model))


@dataclass(frozen=True, slots=True)
class HarborKind:
    """A Harbor task folder (`polar_cli.harbor`): its instruction.md, workdir and limits; its oracle for the gold
    engine; its verifier run in the agent's container after the agent's changes are taken."""

    task: HarborTask
    name = "harbor"

    def shape(self) -> SessionShape:
        t = self.task
        return SessionShape(
            instruction=t.instruction,
            workdir=t.workdir,
            cpus=t.cpus,
            memory_mb=t.memory_mb,
            agent_timeout=t.agent_timeout,
            allowed_hosts=t.allowed_hosts,
            own_repository=False,
        )

    def scripted(self, instance: Instance, workdir: str) -> Task:
        from polar_cli.harbor.verify import oracle_command

        command = oracle_command(self.task) if self.task.has_oracle else None
        return Task(instance.instance_id, "", workdir, command)

    def grade_in_session(self, prepared: Prepared, model: str, recipe: Recipe) -> InSession | None:
        """The agent's changes as a patch (taken before the tests run, so their files are no part of it), then the
        task's verifier in the same container (`harbor.verify`); a runtime failure is an evaluation error."""
        from polar_cli.harbor.verify import error_verdict, verify
        from polar_cli.harness.collect import collect_patch

        try:
            patch: str | None = collect_patch(
                prepared.container, prepared.spec.workdir, prepared.base_commit, prepared.launch.droppings
            )
        except Exception:
            patch = None
        try:
            result = verify(prepared.container, self.task, model, recipe.harbor.reward_threshold)
        except Exception as exc:
            result = error_verdict(self.task, model, f"running the verifier failed: {exc or type(exc).__name__}")
        return InSession(result, patch)

    def grade_after(
        self, runtime: Runtime, instance: Instance, image: str, patch: str, model: str, recipe: Recipe
    ) -> Evaluation | None:
        return None


SWE = SweTask()


def kind_of(harbor: HarborTask | None) -> TaskKind:
    """The kind of a selected instance: a Harbor task when the manifest source made it one, else a SWE instance."""
    return HarborKind(harbor) if harbor is not None else SWE
