"""One harness session in one container: INIT (start, expose the bundle, write config), RUN, POSTRUN, always removed.

The session's timeout starts at INIT (DESIGN.md). A harness that runs out of time is killed and still goes through
POSTRUN, so the patch and the transcripts of a partial session are kept (status "timeout").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from polar_cli.harness.base import HarnessAdapter, Wiring
from polar_cli.harness.collect import collect_artifacts, collect_patch, prepare_base
from polar_cli.runtime.base import Container, ContainerSpec, Runtime, RuntimeFailure

SessionStatus = Literal["ok", "harness_error", "timeout", "init_error", "postrun_error"]
# a harness's own output kept in the outcome (the full output goes to the artifacts dir)
OUTPUT_TAIL = 64 * 1024


@dataclass(frozen=True, slots=True)
class SessionSpec:
    session_id: str
    harness: HarnessAdapter
    image: str
    instruction: str
    # the bundle data container to mount (images.ensure_bundle_container)
    bundle_container: str
    # None: the workdir's HEAD when the session starts (a fresh repository when the workdir has none)
    base_commit: str | None = None
    workdir: str = "/testbed"
    timeout: float = 1800.0
    network: str = "host"
    cpus: float | None = None
    memory_bytes: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SessionOutcome:
    session_id: str
    harness: str
    status: SessionStatus
    exit_code: int | None
    patch: str
    base_commit: str | None
    # the last OUTPUT_TAIL bytes of the harness's stdout and stderr, decoded
    output: str
    artifacts: tuple[str, ...]
    timings: Mapping[str, float]
    error: str | None = None


def run_session(
    runtime: Runtime,
    spec: SessionSpec,
    wiring: Wiring,
    artifacts_dir: Path | None = None,
    after_run: Callable[[Container], None] | None = None,
) -> SessionOutcome:
    """Run one session to the end; the container is removed whatever happens (also on KeyboardInterrupt).

    ``after_run`` sees the container after the harness stopped and before POSTRUN (tests, in-place evaluation).
    """
    launch = spec.harness.launch(spec.instruction, wiring, spec.workdir)
    timings: dict[str, float] = {}
    start = time.monotonic()
    deadline = start + spec.timeout
    labels = {**spec.labels, "polar.session": spec.session_id, "polar.harness": spec.harness.name}
    container_spec = ContainerSpec(
        image=spec.image,
        role="session",
        volumes_from=(spec.bundle_container,),
        network=spec.network,
        cpus=spec.cpus,
        memory_bytes=spec.memory_bytes,
        labels=labels,
        workdir=spec.workdir,
    )

    def outcome(status: SessionStatus, **kw: Any) -> SessionOutcome:
        timings["total"] = time.monotonic() - start
        return _outcome(spec, status, timings, **kw)

    try:
        container = runtime.start(container_spec)
        timings["create"] = time.monotonic() - start
    except RuntimeFailure as exc:
        timings["init"] = time.monotonic() - start
        return outcome("init_error", error=str(exc))
    try:
        try:
            base = spec.base_commit or prepare_base(container, spec.workdir)
            if launch.files:
                container.put_files(launch.files, mode=0o600)
        except RuntimeFailure as exc:
            timings["init"] = time.monotonic() - start
            return outcome("init_error", error=str(exc))
        timings["init"] = time.monotonic() - start

        run_start = time.monotonic()
        result = container.exec(
            launch.argv,
            timeout=max(deadline - run_start, 1.0),
            env=launch.env,
            workdir=launch.workdir,
            stdin=launch.stdin,
        )
        timings["run"] = time.monotonic() - run_start
        status: SessionStatus = "timeout" if result.timed_out else ("ok" if result.exit_code == 0 else "harness_error")
        output = result.output[-OUTPUT_TAIL:].decode("utf-8", errors="replace")

        post_start = time.monotonic()
        if after_run is not None:
            after_run(container)
        found: list[str] = []
        if artifacts_dir is not None:
            artifacts_dir.mkdir(parents=True, exist_ok=True)
            (artifacts_dir / "harness-output.log").write_bytes(result.output)
            found = collect_artifacts(container, launch.artifacts, artifacts_dir / "files")
        try:
            patch = collect_patch(container, spec.workdir, base, launch.droppings)
        except RuntimeFailure as exc:
            timings["postrun"] = time.monotonic() - post_start
            return outcome("postrun_error", exit_code=result.exit_code, base_commit=base, output=output, error=str(exc))
        timings["postrun"] = time.monotonic() - post_start
        error = f"the harness ran past its {spec.timeout:g} s timeout" if result.timed_out else None
        if status == "harness_error":
            error = f"the harness exited with {result.exit_code}"
        return outcome(
            status,
            exit_code=result.exit_code,
            patch=patch,
            base_commit=base,
            output=output,
            artifacts=tuple(found),
            error=error,
        )
    finally:
        container.remove()


def _outcome(
    spec: SessionSpec,
    status: SessionStatus,
    timings: Mapping[str, float],
    *,
    exit_code: int | None = None,
    patch: str = "",
    base_commit: str | None = None,
    output: str = "",
    artifacts: tuple[str, ...] = (),
    error: str | None = None,
) -> SessionOutcome:
    return SessionOutcome(
        spec.session_id,
        spec.harness.name,
        status,
        exit_code,
        patch,
        base_commit,
        output,
        artifacts,
        dict(timings),
        error,
    )
