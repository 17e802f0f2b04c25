"""A TaskRequest resolved against the service: everything its sessions need, or a `TaskError` naming the field.

`resolve` runs when a task is submitted (a 400 for what the models cannot see: an unknown harness, a manifest row
that does not parse, an instance the manifest lacks) and again when the journal is replayed after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from polar_cli.errors import ConfigError, PolarError
from polar_cli.harbor.tasks import HarborTask
from polar_cli.harness.base import HarnessAdapter
from polar_cli.harness.custom import check_custom_names, custom_adapter
from polar_cli.runtime.base import Sandbox
from polar_cli.serve.config import ServeConfig
from polar_cli.serve.models import (
    CommandEvaluator,
    HarborEvaluator,
    InstanceRef,
    SessionCompletedEvaluator,
    SwebenchEvaluator,
    TaskRequest,
)
from polar_cli.swe.manifest import Instance, load_manifest, parse_row
from polar_cli.tasks.kinds import TaskKind, kind_of

T = TypeVar("T")


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
    evaluator: SwebenchEvaluator | CommandEvaluator | HarborEvaluator | SessionCompletedEvaluator
    strategy: str
    drift: str
    token_in: bool
    network: str
    cpus: float | None
    memory_mb: int | None
    output_limit_mb: int | None
    # the service's, never a task's: a trainer cannot loosen the sandbox (docs/security.md)
    sandbox: Sandbox
    # the Harbor task (``harbor_task``); None: an instruction or an instance
    harbor: HarborTask | None = None

    @property
    def kind(self) -> TaskKind:
        return kind_of(self.harbor)

    @property
    def task_kind(self) -> str:
        return self.kind.name

    @property
    def task_id(self) -> str:
        return self.request.task_id


class Manifests:
    """Manifests read once per file version (path, mtime): a trainer names the same manifest in every task.

    A manifest can be large (a 99 MB file takes seconds to parse): the service reads it off the event loop
    (`preload`, in a worker thread) before `resolve` looks an instance up. At most ``versions`` manifests are kept (the
    least recently used goes first), and a file's older versions go as soon as a newer one is read.
    """

    def __init__(self, versions: int = 4) -> None:
        self.versions = versions
        self._cache: OrderedDict[tuple[str, float], dict[str, Instance]] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, float], asyncio.Future[None]] = {}

    async def preload(self, request: TaskRequest) -> None:
        """Read the manifest ``request`` names, if any, in a worker thread (a read already under way is shared);
        what fails is left for `resolve` to report."""
        ref = request.instance
        if not isinstance(ref, InstanceRef):
            return
        key = _version(ref.manifest)
        with self._lock:
            if key in self._cache:
                return
        pending = self._loading.get(key)
        if pending is None:
            pending = self._loading[key] = asyncio.ensure_future(asyncio.to_thread(self._rows_or_none, ref, key))
            pending.add_done_callback(lambda _: self._loading.pop(key, None))
        await asyncio.shield(pending)

    def _rows_or_none(self, ref: InstanceRef, key: tuple[str, float]) -> None:
        with contextlib.suppress(TaskError):  # `resolve` reports it
            self._rows(ref, key)

    def _rows(self, ref: InstanceRef, key: tuple[str, float]) -> dict[str, Instance]:
        with self._lock:
            rows = self._cache.get(key)
            if rows is not None:
                self._cache.move_to_end(key)
                return rows
        try:
            rows = {i.instance_id: i for i in load_manifest(ref.manifest)}
        except ConfigError as exc:
            raise TaskError("instance.manifest", str(exc)) from exc
        with self._lock:
            for old in [k for k in self._cache if k[0] == key[0] and k != key]:
                del self._cache[old]  # an older version of the same file
            self._cache[key] = rows
            while len(self._cache) > self.versions:
                self._cache.popitem(last=False)
        return rows

    def cached(self) -> list[tuple[str, float]]:
        with self._lock:
            return list(self._cache)

    def instance(self, ref: InstanceRef) -> Instance:
        found = self._rows(ref, _version(ref.manifest)).get(ref.instance_id)
        if found is None:
            raise TaskError("instance.instance_id", f"{ref.instance_id!r} is not in {ref.manifest}")
        return found


def _version(manifest: str) -> tuple[str, float]:
    path = Path(manifest)
    try:
        return str(path.resolve()), os.stat(path).st_mtime
    except OSError:
        return manifest, 0.0  # a datasets name, or a file that is not there: load_manifest says which


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

    harbor = _harbor(request)
    instance = harbor.instance(harbor_image(harbor)) if harbor is not None else _instance(request, manifests)
    harness = _harness(request, config, offered)
    rt = request.runtime
    shape = kind_of(harbor).shape()  # what the task sets of its session; the request's own settings come first
    workdir = rt.workdir or shape.workdir or config.runtime.workdir
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
        instruction=harbor_instruction(request, harbor)
        if harbor is not None
        else _instruction(request, instance, workdir),
        workdir=workdir,
        timeout=request.timeout_seconds or config.timeouts.session,
        agent_timeout=spec.agent_timeout or shape.agent_timeout or config.timeouts.agent,
        evaluator=evaluator,
        strategy=builder.strategy or config.builder.strategy,
        drift=builder.drift or config.builder.drift,
        token_in=token_in,
        network=rt.network or config.runtime.network,
        cpus=_first(rt.cpus, shape.cpus, config.runtime.cpus),
        memory_mb=_first(rt.memory_mb, shape.memory_mb, config.runtime.memory_mb),
        output_limit_mb=rt.output_limit_mb if rt.output_limit_mb is not None else config.runtime.output_limit_mb,
        sandbox=config.runtime.sandbox(),
        harbor=harbor,
    )


def _first(*values: T | None) -> T | None:
    return next((v for v in values if v is not None), None)


def _harbor(request: TaskRequest) -> HarborTask | None:
    """The Harbor task ``harbor_task`` names (`harbor.tasks.load_task`), or None."""
    if request.harbor_task is None:
        return None
    from polar_cli.harbor.tasks import is_task_dir, load_task

    path = Path(request.harbor_task)
    if not is_task_dir(path):
        raise TaskError("harbor_task", f"{request.harbor_task}: not a Harbor task folder (no task.toml)")
    try:
        return load_task(path)
    except ConfigError as exc:
        raise TaskError("harbor_task", str(exc)) from exc


def harbor_image(task: HarborTask) -> str:
    """The task's image tag (built as generate and validate build it, with the default FROM table)."""
    from polar_cli.harbor.config import DEFAULT_BASE_IMAGES
    from polar_cli.harbor.images import base_tag, task_image

    return task_image(task, DEFAULT_BASE_IMAGES, base_tag()).tag


def harbor_instruction(request: TaskRequest, task: HarborTask) -> str:
    """instruction.md as Harbor tells it, unless the request gives its own instruction."""
    return request.instruction if request.instruction is not None else task.instruction
