"""A harness session's three container stages, apart, so the node can pool them: prepare, run, finish.

`harness.session.run_session` does the same three steps in one call for ad-hoc runs; the node needs them separate
(INIT in one pool, RUN in another, POSTRUN in a third), built from the same pieces: the adapter's `Launch`, the
runtime's `Container`, `collect.prepare_base` / `collect_patch` / `collect_artifacts`.

Docker calls block, so each step runs on the node's executor threads. A step whose awaiting task is cancelled
(Ctrl-C) cannot stop its thread; `in_thread` then cleans up what the thread returns once it ends (a container that
finished starting after the session was cancelled is removed, not leaked).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from polar_cli.harness.base import HarnessAdapter, Launch, Wiring
from polar_cli.harness.collect import collect_artifacts, collect_patch, prepare_base
from polar_cli.runtime.base import Container, ContainerSpec, ExecResult, Runtime, RuntimeFailure

log = logging.getLogger("polar.node")
X = TypeVar("X")
HarnessStatus = Literal["ok", "timeout", "harness_error"]


async def in_thread(executor: Executor, fn: Callable[[], X], on_abandon: Callable[[X], None] | None = None) -> X:
    """``fn()`` on ``executor``; if the caller is cancelled, ``on_abandon(result)`` runs when ``fn`` returns."""
    future: Future[X] = executor.submit(fn)
    try:
        return await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        if on_abandon is not None:
            callback = on_abandon

            def cleanup(done: Future[X]) -> None:
                if not done.cancelled() and done.exception() is None:
                    try:
                        callback(done.result())
                    except Exception:
                        log.exception("cleaning up after a cancelled step failed")

            future.add_done_callback(cleanup)
        raise


@dataclass(frozen=True, slots=True)
class ContainerSettings:
    network: str = "host"
    cpus: float | None = None
    memory_bytes: int | None = None
    workdir: str = "/testbed"
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A started container with the harness's files in place, and the run it is ready for."""

    session_id: str
    container: Container
    launch: Launch
    base_commit: str


@dataclass(frozen=True, slots=True)
class HarnessRun:
    status: HarnessStatus
    exit_code: int | None
    output: bytes
    seconds: float


@dataclass(frozen=True, slots=True)
class Finished:
    patch: str
    artifacts: tuple[str, ...]
    error: str | None = None


class DockerSessions:
    """The container side of sessions on one runtime: prepare (INIT), run (RUN), finish and remove (POSTRUN)."""

    def __init__(self, runtime: Runtime, executor: Executor, settings: ContainerSettings) -> None:
        self.runtime = runtime
        self.executor = executor
        self.settings = settings

    async def prepare(
        self,
        session_id: str,
        harness: HarnessAdapter,
        image: str,
        instruction: str,
        wiring: Wiring,
        bundle_container: str,
        base_commit: str | None,
        labels: Mapping[str, str],
    ) -> Prepared:
        """Start the instance container, make sure git has a base commit, write the harness's config files."""
        s = self.settings
        launch = harness.launch(instruction, wiring, s.workdir)
        spec = ContainerSpec(
            image=image,
            role="session",
            volumes_from=(bundle_container,),
            network=s.network,
            cpus=s.cpus,
            memory_bytes=s.memory_bytes,
            labels={**s.labels, **labels, "polar.session": session_id, "polar.harness": harness.name},
            workdir=s.workdir,
        )

        def work() -> Prepared:
            container = self.runtime.start(spec)
            try:
                base = base_commit or prepare_base(container, s.workdir)
                if launch.files:
                    container.put_files(launch.files, mode=0o600)
            except BaseException:
                container.remove()
                raise
            return Prepared(session_id, container, launch, base)

        return await in_thread(self.executor, work, on_abandon=lambda p: p.container.remove())

    async def run(self, prepared: Prepared, deadline: float, agent_timeout: float | None) -> HarnessRun:
        """Run the harness until it exits or ``deadline`` (time.monotonic) / ``agent_timeout`` passes."""
        launch = prepared.launch
        left = deadline - time.monotonic()
        timeout = max(min(left, agent_timeout) if agent_timeout else left, 1.0)

        def work() -> ExecResult:
            return prepared.container.exec(
                launch.argv, timeout=timeout, env=launch.env, workdir=launch.workdir, stdin=launch.stdin
            )

        result = await in_thread(self.executor, work)
        status: HarnessStatus = "timeout" if result.timed_out else ("ok" if result.exit_code == 0 else "harness_error")
        return HarnessRun(status, result.exit_code, result.output, result.seconds)

    async def finish(self, prepared: Prepared, artifacts_dir: Path | None, output: bytes | None) -> Finished:
        """Copy out the harness's logs, take the patch, remove the container (always)."""
        workdir = self.settings.workdir

        def work() -> Finished:
            try:
                found: list[str] = []
                if artifacts_dir is not None:
                    artifacts_dir.mkdir(parents=True, exist_ok=True)
                    if output is not None:
                        (artifacts_dir / "harness-output.log").write_bytes(output)
                    found = collect_artifacts(prepared.container, prepared.launch.artifacts, artifacts_dir / "files")
                try:
                    patch = collect_patch(prepared.container, workdir, prepared.base_commit, prepared.launch.droppings)
                except RuntimeFailure as exc:
                    return Finished("", tuple(found), str(exc))
                return Finished(patch, tuple(found))
            finally:
                prepared.container.remove()

        return await in_thread(self.executor, work)

    async def discard(self, prepared: Prepared) -> None:
        await in_thread(self.executor, prepared.container.remove)
