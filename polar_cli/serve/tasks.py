"""A TaskRequest resolved against the service: everything its sessions need, or a `TaskError` naming the field.

`resolve` runs when a task is submitted (a 400 for what the models cannot see: an unknown harness, a manifest row
that does not parse, an instance the manifest lacks) and again when the journal is replayed after a restart.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from polar_cli.errors import ConfigError, PolarError
from polar_cli.harness.base import HarnessAdapter
from polar_cli.harness.custom import check_custom_names, custom_adapter
from polar_cli.serve.config import ServeConfig
from polar_cli.serve.models import (
    CommandEvaluator,
    InstanceRef,
    SessionCompletedEvaluator,
    SwebenchEvaluator,
    TaskRequest,
)
from polar_cli.swe.manifest import Instance, load_manifest, parse_row


class TaskError(PolarError):
    """A task the service cannot run as given: a 400 naming ``field``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class TaskPlan:
    """A task ready to expand into sessions."""

    request: TaskRequest
    harness: HarnessAdapter
    instance: Instance | None
    image: str
    instruction: str
    workdir: str
    timeout: float
    agent_timeout: float | None
    evaluator: SwebenchEvaluator | CommandEvaluator | SessionCompletedEvaluator
    strategy: str
    drift: str
    token_in: bool
    network: str
    cpus: float | None
    memory_mb: int | None
    output_limit_mb: int | None

    @property
    def task_id(self) -> str:
        return self.request.task_id


class Manifests:
    """Manifests read once per file version (path, mtime): a trainer names the same manifest in every task."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, float], dict[str, Instance]] = {}
        self._lock = threading.Lock()

    def instance(self, ref: InstanceRef) -> Instance:
        path = Path(ref.manifest)
        try:
            key = (str(path.resolve()), os.stat(path).st_mtime)
        except OSError:
            key = (ref.manifest, 0.0)  # a datasets name, or a file that is not there: load_manifest says which
        with self._lock:
            rows = self._cache.get(key)
        if rows is None:
            try:
                rows = {i.instance_id: i for i in load_manifest(ref.manifest)}
            except ConfigError as exc:
                raise TaskError("instance.manifest", str(exc)) from exc
            with self._lock:
                self._cache[key] = rows
        found = rows.get(ref.instance_id)
        if found is None:
            raise TaskError("instance.instance_id", f"{ref.instance_id!r} is not in {ref.manifest}")
        return found


def _instance(request: TaskRequest, manifests: Manifests) -> Instance | None:
    if request.instance is None:
        return None
    if isinstance(request.instance, InstanceRef):
        return manifests.instance(request.instance)
    try:
        return parse_row(request.instance, 0, source="instance")
    except ConfigError as exc:
        raise TaskError("instance", str(exc).removeprefix("instance row 0 ").lstrip(": ")) from exc


def _harness(request: TaskRequest, config: ServeConfig, offered: dict[str, HarnessAdapter]) -> HarnessAdapter:
    spec = request.harness_spec()
    if spec.custom is not None:
        try:
            check_custom_names({spec.name: spec.custom})
        except ValueError as exc:
            raise TaskError("harness.name", str(exc)) from exc
        bundle = spec.custom.bundle_ref()
        if bundle is not None and bundle.kind == "harness" and bundle.name not in offered:
            raise TaskError("harness.custom.bundle", f"{bundle.name!r} is not a harness this service offers")
        return custom_adapter(spec.name, spec.custom)
    adapter = offered.get(spec.name)
    if adapter is None:
        from polar_cli.harness import ALIASES

        adapter = offered.get(ALIASES.get(spec.name, ""))
    if adapter is None:
        raise TaskError("harness", f"{spec.name!r} is not offered here; this service runs {', '.join(offered)}")
    return adapter


def _instruction(request: TaskRequest, instance: Instance | None, workdir: str) -> str:
    if instance is None:
        assert request.instruction is not None  # the model requires one of the two
        return request.instruction
    template = request.instruction or "{problem_statement}"
    try:
        return template.format(
            problem_statement=instance.problem_statement,
            repo=instance.repo,
            instance_id=instance.instance_id,
            workdir=workdir,
        )
    except (KeyError, IndexError, ValueError) as exc:
        raise TaskError(
            "instruction",
            f"{exc!r}; with an instance it may use {{problem_statement}}, {{repo}}, {{instance_id}}, "
            "{workdir} (double other braces)",
        ) from exc


def resolve(
    request: TaskRequest, config: ServeConfig, offered: dict[str, HarnessAdapter], manifests: Manifests
) -> TaskPlan:
    """The plan of ``request`` on this service; `TaskError` naming the field it cannot run."""
    from polar_cli.swe.images import instance_image

    instance = _instance(request, manifests)
    harness = _harness(request, config, offered)
    rt = request.runtime
    workdir = rt.workdir or config.runtime.workdir
    if rt.image is not None:
        image = rt.image
    else:
        assert instance is not None
        try:
            image = instance_image(instance, None)
        except ConfigError as exc:
            raise TaskError("runtime.image", str(exc)) from exc
    evaluator = request.evaluator_spec()
    builder = request.builder
    token_in = builder.token_in if builder.token_in is not None else config.engine.token_in
    if token_in and not config.engine.token_in:
        raise TaskError("builder.token_in", "this service's engine is not set up for token-in (engine.token_in)")
    spec = request.harness_spec()
    return TaskPlan(
        request=request,
        harness=harness,
        instance=instance,
        image=image,
        instruction=_instruction(request, instance, workdir),
        workdir=workdir,
        timeout=request.timeout_seconds or config.timeouts.session,
        agent_timeout=spec.agent_timeout or config.timeouts.agent,
        evaluator=evaluator,
        strategy=builder.strategy or config.builder.strategy,
        drift=builder.drift or config.builder.drift,
        token_in=token_in,
        network=rt.network or config.runtime.network,
        cpus=rt.cpus if rt.cpus is not None else config.runtime.cpus,
        memory_mb=rt.memory_mb if rt.memory_mb is not None else config.runtime.memory_mb,
        output_limit_mb=rt.output_limit_mb if rt.output_limit_mb is not None else config.runtime.output_limit_mb,
    )
