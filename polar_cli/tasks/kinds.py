"""The kinds of task a session works on, behind the one interface the stages call (`TaskKind`).

A kind says what it sets of its session (`SessionShape`: its instruction, its workdir, its limits, the hosts it may
reach), what the scripted engines know of it (gold's reference patch, a Harbor task's oracle), and how a session of
it is graded: in the agent's own container before it is removed (a Harbor verifier: `grade_in_session`), or after,
in a fresh container from the task's image (SWE-bench's tests: `grade_after`, in the container `grader` started
while the agent's was still collected), and how the images its sessions start from are made ready (`ready_images`).
`generate.stages`, `serve.stages` and the cluster's nodes never ask which kind they hold.

Adding a kind: a `TaskKind` here with its methods, and its line in `kind_of`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from polar_cli.harbor.tasks import HarborTask
from polar_cli.inference.gold import Task
from polar_cli.swe.evaluate import EvalJob, EvalOptions, Evaluation, run_job, start_container
from polar_cli.swe.manifest import Instance

if TYPE_CHECKING:
    from polar_cli.config import Recipe
    from polar_cli.harbor.verify import Verdict as HarborVerdict
    from polar_cli.harness.session import Prepared
    from polar_cli.runtime.base import Container, Runtime
    from polar_cli.tasks.images import Images


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


@dataclass(frozen=True, slots=True)
class Grading:
    """What a kind grades with: the run's runtime and recipe, and the model's name for the evaluation."""

    runtime: Runtime
    recipe: Recipe
    model: str


class TaskKind(ABC):
    """What the stages ask of a task's kind. A kind grades in the session or after it: each overrides its own half,
    and the other half's defaults say "not this kind"."""

    name: str  # the row's ``task_kind``

    def shape(self) -> SessionShape:
        return SessionShape()

    @abstractmethod
    def scripted(self, instance: Instance, workdir: str) -> Task:
        """What the scripted engines (gold, noop) know of the task."""

    def grade_in_session(self, grading: Grading, prepared: Prepared) -> InSession | None:
        """The grade taken before the agent's container goes (None: this kind grades after)."""
        return None

    def grader(self, grading: Grading, image: str) -> Container | None:
        """The fresh container `grade_after` will grade in, started while the agent's is collected (None: none)."""
        return None

    def grade_after(
        self, grading: Grading, instance: Instance, image: str, patch: str, ready: Container | None = None
    ) -> Evaluation | None:
        """The grade of the agent's patch in a fresh container, ``ready`` when `grader` started it (which this
        removes, used or not); None: this kind graded in the session."""
        return None

    @classmethod
    @abstractmethod
    def ready_images(cls, tasks: Sequence[tuple[Instance, Self]], images: Images) -> dict[str, str]:
        """instance_id -> the image its sessions start from, each present in ``images.runtime``: built when
        ``images.build`` and the kind knows how, else pulled (a clear `RuntimeFailure` naming one that cannot be)."""


@dataclass(frozen=True, slots=True)
class SweTask(TaskKind):
    """A SWE-Gym / SWE-bench instance: the recipe's instruction and workdir, SWE-bench's grading after the session."""

    name = "swe"

    def scripted(self, instance: Instance, workdir: str) -> Task:
        return Task(instance.instance_id, instance.patch, workdir)

    def grader(self, grading: Grading, image: str) -> Container | None:
        return start_container(grading.runtime, self._options(image, grading.recipe))

    def grade_after(
        self, grading: Grading, instance: Instance, image: str, patch: str, ready: Container | None = None
    ) -> Evaluation | None:
        job = EvalJob(instance, patch, self._options(image, grading.recipe), grading.model)
        return run_job(grading.runtime, job, ready)

    @classmethod
    def ready_images(cls, tasks: Sequence[tuple[Instance, Self]], images: Images) -> dict[str, str]:
        """The instances' images by the manifest's rows or its template; those their rows' build specs make built
        (each tagged by its build context's digest) when they come from the run's own manifest, the rest pulled."""
        from polar_cli.swe.images import build_images, ensure_image, instance_image

        names = {i.instance_id: instance_image(i, images.template) for i, _ in tasks}
        if images.build and images.manifest is not None:
            build_images([i for i, _ in tasks], images.runtime, log=images.log)
        for name in sorted(set(names.values())):
            ensure_image(images.runtime, name)
        return names

    def _options(self, image: str, recipe: Recipe) -> EvalOptions:
        e = recipe.eval
        return EvalOptions(image=image, timeout=recipe.timeouts.eval, network=e.network, tamper=e.tamper)


@dataclass(frozen=True, slots=True)
class HarborKind(TaskKind):
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

    def grade_in_session(self, grading: Grading, prepared: Prepared) -> InSession | None:
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
            result = verify(prepared.container, self.task, grading.model, grading.recipe.harbor.reward_threshold)
        except Exception as exc:
            why = f"running the verifier failed: {exc or type(exc).__name__}"
            result = error_verdict(self.task, grading.model, why)
        return InSession(result, patch)

    @classmethod
    def ready_images(cls, tasks: Sequence[tuple[Instance, Self]], images: Images) -> dict[str, str]:
        """Each task's image from its Dockerfile (FROM mapped by ``images.harbor_bases``), built when missing."""
        from polar_cli.harbor.config import DEFAULT_BASE_IMAGES
        from polar_cli.harbor.images import ensure_task_images

        bases = images.harbor_bases if images.harbor_bases is not None else DEFAULT_BASE_IMAGES
        built = ensure_task_images(
            [k.task for _, k in tasks], bases, images.runtime, build=images.build, log=images.log
        )
        return {i.instance_id: built[k.task.name] for i, k in tasks}


SWE = SweTask()


def kind_of(harbor: HarborTask | None) -> TaskKind:
    """The kind of a selected instance: a Harbor task when the manifest source made it one, else a SWE instance."""
    return HarborKind(harbor) if harbor is not None else SWE
