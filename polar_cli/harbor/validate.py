"""`polar validate DIR` on Harbor tasks: each oracle must earn reward 1, and the tests must fail without it.

For each task, two fresh containers of its image (no network, as generate's sessions): in one the tests run on the
task as shipped (a task whose tests already pass there is flagged: any agent, or none, would be rewarded); in the
other the oracle runs first, as Harbor's oracle agent runs it (solution/ copied to /solution, solve.sh), then the
tests. Valid = the oracle's reward is 1 (every named value, when reward.json names several) and the tests fail
without it. Broken otherwise; ``error`` when a container or the verifier could not run. Each verifier's output is
kept under ``logs/harbor_validate/<run_id>/{oracle,without_solution}/<task>/test_output.txt``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from polar_cli.harbor.tasks import HarborTask
from polar_cli.harbor.verify import Verdict, error_verdict, oracle_command, verify
from polar_cli.runtime.base import ContainerSpec, Runtime

MODEL = "polar-harbor-validate"
SOLVE_TIMEOUT = 600.0
Status = Literal["valid", "broken", "error"]


@dataclass(frozen=True, slots=True)
class TaskValidation:
    task: str
    status: Status
    oracle: Verdict
    without_solution: Verdict
    reasons: tuple[str, ...] = ()
    seconds: float = 0.0
    log_paths: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "task_kind": "harbor",
            "status": self.status,
            "oracle_rewards": dict(self.oracle.rewards) if self.oracle.rewards is not None else None,
            "without_solution_rewards": (
                dict(self.without_solution.rewards) if self.without_solution.rewards is not None else None
            ),
            "reasons": list(self.reasons),
            "seconds": round(self.seconds, 3),
            "log_paths": self.log_paths,
        }


def _run(runtime: Runtime, task: HarborTask, image: str, *, solve: bool) -> Verdict:
    spec = ContainerSpec(
        image=image,
        role="harbor-validate",
        network="none",
        workdir=task.workdir,
        cpus=task.cpus,
        memory_bytes=task.memory_mb * 1024 * 1024 if task.memory_mb else None,
    )
    try:
        container = runtime.start(spec)
    except Exception as exc:
        return error_verdict(task, MODEL, f"starting a container of {image} failed: {exc}")
    try:
        if solve:
            env = dict(task.solution_env)
            result = container.exec(["sh", "-c", oracle_command(task)], timeout=SOLVE_TIMEOUT, env=env)
            if result.timed_out:
                return error_verdict(task, MODEL, f"the oracle ran past {SOLVE_TIMEOUT:g} s")
        # the oracle must beat the reward every named value can reach: threshold 1
        return verify(container, task, MODEL, 1.0)
    except Exception as exc:
        return error_verdict(task, MODEL, f"running the task failed: {exc or type(exc).__name__}")
    finally:
        container.remove()


def validate_task(runtime: Runtime, task: HarborTask, image: str) -> TaskValidation:
    """One task's two runs and its verdict."""
    start = time.monotonic()
    if not task.has_oracle:
        missing = error_verdict(task, MODEL, "no solution/solve.sh")
        return TaskValidation(task.name, "broken", missing, missing, ("no oracle: solution/solve.sh is missing",))
    without = _run(runtime, task, image, solve=False)
    oracle = _run(runtime, task, image, solve=True)
    reasons: list[str] = []
    if oracle.evaluation.outcome == "error":
        reasons.append(f"oracle: {oracle.evaluation.reason}")
    elif oracle.rewards is not None and any(v < 1.0 for v in oracle.rewards.values()):
        reasons.append(f"oracle earns {_named(oracle.rewards)}, not 1")
    if without.evaluation.outcome == "error":
        reasons.append(f"without the solution: {without.evaluation.reason}")
    elif without.evaluation.resolved:
        reasons.append("flagged: the tests pass without the solution")
    errored = oracle.evaluation.outcome == "error" or without.evaluation.outcome == "error"
    status: Status = "valid" if not reasons else ("error" if errored else "broken")
    return TaskValidation(task.name, status, oracle, without, tuple(reasons), time.monotonic() - start)


def _named(rewards: Mapping[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in rewards.items())


def write_logs(validation: TaskValidation, root: Path, run_id: str) -> TaskValidation:
    """Each run's verifier output as ``<root>/logs/harbor_validate/<run_id>/<run>/<task>/test_output.txt``."""
    paths = {}
    for name, verdict in (("oracle", validation.oracle), ("without_solution", validation.without_solution)):
        relative = Path("logs", "harbor_validate", run_id, name, validation.task, "test_output.txt")
        target = root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(verdict.evaluation.log)
        paths[name] = str(relative)
    validation.log_paths.update(paths)
    return validation


def validate_tasks(
    runtime: Runtime,
    tasks: list[HarborTask],
    images: Mapping[str, str],
    *,
    workers: int = 1,
    on_done: Callable[[TaskValidation], None] | None = None,
) -> list[TaskValidation]:
    """Every task validated, ``workers`` at a time; in the tasks' order."""

    def one(task: HarborTask) -> TaskValidation:
        result = validate_task(runtime, task, images[task.name])
        if on_done is not None:
            on_done(result)
        return result

    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="polar-harbor") as pool:
        return list(pool.map(one, tasks))


def validate_source(
    source: str,
    *,
    names: list[str] | None,
    limit: int | None,
    workers: int,
    logs_root: Path,
    run_id: str,
    echo: Callable[[str], None],
) -> list[TaskValidation]:
    """`polar validate DIR`: load the tasks, build their images (the default FROM table), validate each."""
    from polar_cli.errors import ConfigError
    from polar_cli.harbor.config import HarborConfig
    from polar_cli.harbor.images import ensure_task_images
    from polar_cli.harbor.tasks import load_tasks
    from polar_cli.runtime.docker import DockerRuntime

    tasks = load_tasks(source)
    if names:
        unknown = sorted(set(names) - {t.name for t in tasks})
        if unknown:
            raise ConfigError(f"harbor tasks {source}: no task named {', '.join(unknown)}")
        tasks = [t for t in tasks if t.name in names]
    tasks = tasks[:limit] if limit is not None else tasks
    runtime = DockerRuntime()
    try:
        images = ensure_task_images(tasks, HarborConfig().base_images, runtime, log=echo)

        def done(v: TaskValidation) -> None:
            write_logs(v, logs_root, run_id)
            echo(f"{v.task}: {v.status}" + (f" ({'; '.join(v.reasons)})" if v.reasons else ""))

        return validate_tasks(runtime, tasks, images, workers=workers, on_done=done)
    finally:
        runtime.close()
