"""One harness session in one container, written once: prepare, run, collect, finish, discard.

    prepare   INIT: start the container from the instance image with the harness bundle mounted (in a gateway-only
              sandbox, also the relay and the gateway's socket directory, and with an egress allowlist the proxy's),
              make sure git has a base commit; then at once: the relays must answer, everything after the base
              commit is stripped from the repository (`history`), the harness's config files are written. A
              failure removes the container before it raises.
    run       RUN: the harness's headless run, until it exits or its time is up (then its process tree is killed).
    collect   POSTRUN: the harness's output and its own logs copied out, the patch taken against the base commit (one
              exec and one copy out for both).
    finish    collect, then remove the container, whatever collect did.
    discard   remove the container without collecting (a session cancelled before its run ended).

`run_session` does the five in order, for one ad-hoc session (`polar run`); the node's stage pools call the steps
one by one on executor threads (`node.session_steps`), so INIT, RUN and POSTRUN can sit in different pools. Both
speak one status vocabulary, `SessionStatus`.

The session's timeout starts at INIT (docs/design.md "Stage pools"). A harness that runs out of time is killed and
still goes through POSTRUN, so the patch and the transcripts of a partial session are kept (status "timeout").

How a harness misbehaves decides its status, each with its own reason (`generate.rows.REASONS`):
    oom           it exited non-zero and the kernel's OOM killer killed a process of the container (at the
                  container's memory limit, `SessionSpec.memory_bytes`) while it ran; a harness that survives the
                  kill of a child and exits 0 is "ok"
    output_limit  its stdout and stderr passed `SessionSpec.output_limit` bytes (`OUTPUT_LIMIT`, 1 GiB): it is
                  killed there, like at a timeout, and goes through POSTRUN; the first 8 MiB are kept either way
    background    what it left running in its process group is killed when its own process exits, so the run
                  ends then (not at the timeout); a child in a session of its own ends with the container
    nothing       it exited 0 without changing the repository: "ok" with an empty patch (the row's `no_patch`)

Every step blocks (the runtime's calls do), so none of them may run on an event loop.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from polar_cli.errors import RuntimeFailure
from polar_cli.harness.base import HarnessAdapter, Launch, Wiring
from polar_cli.harness.collect import collect_outputs, prepare_base
from polar_cli.harness.history import Stripped, strip_history
from polar_cli.runtime.base import (
    GATEWAY_ONLY,
    GATEWAY_SOCKET_DIR,
    RELAY_URL,
    Container,
    ContainerSpec,
    ExecResult,
    Log,
    Runtime,
    Sandbox,
    relay_argv,
)
from polar_cli.runtime.egress import egress_relay_argv, with_egress

log = logging.getLogger("polar.harness")

# ok / harness_error / timeout / oom / output_limit: how the harness's run ended; init_error / postrun_error: a step
# around it failed
SessionStatus = Literal["ok", "harness_error", "timeout", "oom", "output_limit", "init_error", "postrun_error"]
RunStatus = Literal["ok", "harness_error", "timeout", "oom", "output_limit"]
# a harness's own output kept in the outcome (the full output goes to the artifacts dir)
OUTPUT_TAIL = 64 * 1024
# how much output a harness may write before it is killed (a runaway loop printing forever, not a chatty agent)
OUTPUT_LIMIT = 1024 * 1024 * 1024
# seconds a gateway-only sandbox's relay has to forward (the probe itself gives up after 10)
RELAY_PROBE_TIMEOUT = 20.0


@dataclass(frozen=True, slots=True)
class SessionSpec:
    session_id: str
    harness: HarnessAdapter
    image: str
    instruction: str
    # what the runtime mounts read-only for the harness's bundle (`mount_bundle`); None: nothing
    bundle: str | None
    # None: the workdir's HEAD when the session starts (a fresh repository when the workdir has none)
    base_commit: str | None = None
    workdir: str = "/testbed"
    timeout: float = 1800.0
    # a Docker network mode or name, or GATEWAY_ONLY (then ``gateway_socket`` and ``relay`` are needed)
    network: str = "host"
    # GATEWAY_ONLY: the host directory of the gateway's Unix socket (`NodeGateway.listen_unix`), mounted read-only
    gateway_socket: str | None = None
    # GATEWAY_ONLY: what the runtime mounts for the relay (`Runtime.relay`)
    relay: str | None = None
    # GATEWAY_ONLY with an egress allowlist: the host directory of its proxy socket (`runtime.egress.with_egress`)
    egress_socket: str | None = None
    cpus: float | None = None
    memory_bytes: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    # leave the repository nothing from after the base commit (`history.STRIP_SCRIPT`): no gold fix to find in git
    strip_history: bool = True
    # bytes of output (stdout and stderr) past which the harness is killed; None: no limit
    output_limit: int | None = OUTPUT_LIMIT
    # pids limit, no-new-privileges and the capabilities kept (`runtime.base.Sandbox`; docs/security.md)
    sandbox: Sandbox = field(default_factory=Sandbox)

    @property
    def gateway_only(self) -> bool:
        return self.network == GATEWAY_ONLY

    def container_spec(self) -> ContainerSpec:
        volumes_from = (self.bundle,) if self.bundle else ()
        binds: dict[str, str] = {}
        command: tuple[str, ...] = ()
        if self.gateway_only:
            if not self.gateway_socket or not self.relay:
                raise RuntimeFailure("a gateway-only session needs the gateway's socket directory and the relay")
            volumes_from = (*volumes_from, self.relay)
            binds = {self.gateway_socket: GATEWAY_SOCKET_DIR}
            command = relay_argv("serve")
        if self.egress_socket and not self.gateway_only:
            raise RuntimeFailure("an egress allowlist needs runtime.network gateway-only")
        spec = ContainerSpec(
            image=self.image,
            role="session",
            volumes_from=volumes_from,
            binds=binds,
            command=command,
            network=self.network,
            cpus=self.cpus,
            memory_bytes=self.memory_bytes,
            labels={**self.labels, "polar.session": self.session_id, "polar.harness": self.harness.name},
            workdir=self.workdir,
            output_limit=self.output_limit,
            sandbox=self.sandbox,
        )
        return with_egress(spec, self.egress_socket) if self.egress_socket else spec


@dataclass(frozen=True, slots=True)
class Prepared:
    """A started container with the harness's files in place, and the run it is ready for."""

    spec: SessionSpec
    container: Container
    launch: Launch
    base_commit: str
    # seconds the runtime took to create and start the container (the rest of INIT is git and config files)
    created: float = 0.0
    # what INIT stripped from the repository's history; None when the spec asked to keep it
    stripped: Stripped | None = None


@dataclass(frozen=True, slots=True)
class HarnessRun:
    status: RunStatus
    exit_code: int | None
    # stdout and stderr interleaved, as the runtime capped them
    output: bytes
    seconds: float
    # why it did not end "ok", in words (`run_error`); None when it did
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Collected:
    patch: str
    artifacts: tuple[str, ...]
    # why the patch could not be taken (then ``patch`` is empty): the session is a postrun_error
    error: str | None = None


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
    stripped: Stripped | None = None


def mount_bundle(runtime: Runtime, adapter: HarnessAdapter, *, build: bool = True, log: Log = print) -> str | None:
    """What sessions of ``adapter`` mount: its own bundle, the one its `BundleRef` names, or None (nothing)."""
    ref = adapter.bundle_ref
    if ref is None:
        return runtime.bundle(adapter.name, build=build, log=log)
    if ref.kind == "harness":
        return runtime.bundle(ref.name, build=build, log=log)
    if ref.kind == "image":
        return runtime.bundle_image(ref.name)
    return None


def prepare(runtime: Runtime, spec: SessionSpec, wiring: Wiring) -> Prepared:
    """INIT. Raises `RuntimeFailure` (or a `ConfigError` for an instruction no harness can take) with nothing left.

    In a gateway-only sandbox the harness is wired to the relay (`RELAY_URL`) whatever ``wiring`` says: the gateway's
    own URL is not reachable from there."""
    if spec.gateway_only:
        wiring = dataclasses.replace(wiring, gateway_url=RELAY_URL)
    launch = spec.harness.launch(spec.instruction, wiring, spec.workdir)
    container_spec = spec.container_spec()
    start = time.monotonic()
    container = runtime.start(container_spec)
    created = time.monotonic() - start
    try:
        base = spec.base_commit or prepare_base(container, spec.workdir)
        # what follows needs nothing of each other, each a round trip to the engine, so it goes at once: stripping
        # touches only .git, and the config files go in once the base commit stands (none of them lands in it)
        steps: list[Callable[[], object]] = []
        if spec.gateway_only:
            steps.append(lambda: wait_for_relay(container))
        if spec.egress_socket:
            steps.append(lambda: wait_for_relay(container, egress_relay_argv("probe"), "the egress proxy"))
        stripped: list[Stripped] = []
        if spec.strip_history:
            steps.append(lambda: stripped.append(strip_history(container, spec.workdir, base)))
        if launch.files:
            steps.append(lambda: container.put_files(launch.files, mode=0o600))
        at_once(steps)
    except BaseException:
        container.remove()
        raise
    return Prepared(spec, container, launch, base, created, stripped[0] if stripped else None)


def at_once(steps: Sequence[Callable[[], object]]) -> None:
    """Run ``steps`` at the same time; once every one has ended, the first that failed (in the order given) raises."""
    if len(steps) <= 1:
        for step in steps:
            step()
        return
    with ThreadPoolExecutor(len(steps), thread_name_prefix="polar-init") as pool:
        futures = [pool.submit(step) for step in steps]
    for future in futures:
        future.result()


def wait_for_relay(container: Container, probe: tuple[str, ...] | None = None, what: str = "the gateway") -> None:
    """Return once the relay forwards to the gateway's (or the egress proxy's) socket; else a `RuntimeFailure`."""
    result = container.exec(probe or relay_argv("probe"), timeout=RELAY_PROBE_TIMEOUT)
    if result.exit_code != 0:
        said = result.output.decode(errors="replace").strip() or f"exit {result.exit_code}"
        raise RuntimeFailure(f"the gateway-only sandbox cannot reach {what}: {said}")


def run(prepared: Prepared, timeout: float, clock: Callable[[], float] = time.monotonic) -> HarnessRun:
    """RUN for at most ``timeout`` seconds on ``clock`` (at least one: a session out of time still gets its harness
    started); a clock that stands still while the gateway is paused credits the pause."""
    launch = prepared.launch
    result = prepared.container.exec(
        launch.argv,
        timeout=max(timeout, 1.0),
        env=launch.env,
        workdir=launch.workdir,
        stdin=launch.stdin,
        clock=clock,
    )
    status = run_status(result)
    error = run_error(prepared.spec, status, result.exit_code)
    return HarnessRun(status, result.exit_code, result.output, result.seconds, error)


def run_status(result: ExecResult) -> RunStatus:
    """How the harness's exec ended, in the order that decides: out of time, out of output, exit 0, out of memory."""
    if result.timed_out:
        return "timeout"
    if result.over_limit:
        return "output_limit"
    if result.exit_code == 0:
        return "ok"
    return "oom" if result.oom_killed else "harness_error"


def run_error(spec: SessionSpec, status: RunStatus, exit_code: int | None) -> str | None:
    """What went wrong in a run that did not end "ok", in words."""
    if status == "timeout":
        return f"the harness ran past its {spec.timeout:g} s timeout"
    if status == "output_limit":
        return f"the harness wrote more than {_size(spec.output_limit)} of output and was killed"
    if status == "oom":
        limit = f" ({_size(spec.memory_bytes)})" if spec.memory_bytes else ""
        return (
            f"out of memory: the kernel killed a process of the harness at the container's memory limit{limit};"
            f" the harness exited with {exit_code}"
        )
    if status == "harness_error":
        return f"the harness exited with {exit_code}"
    return None


def _size(n: int | None) -> str:
    if n is None:
        return "no limit"
    return f"{n / (1024 * 1024 * 1024):g} GiB" if n >= 1024**3 else f"{n / (1024 * 1024):g} MiB"


def collect(prepared: Prepared, artifacts_dir: Path | None, output: bytes | None) -> Collected:
    """POSTRUN: the harness's output and logs into ``artifacts_dir`` (when given), and the patch (one exec)."""
    files: Path | None = None
    if artifacts_dir is not None:
        artifacts_dir.mkdir(parents=True, exist_ok=True)
        if output is not None:
            (artifacts_dir / "harness-output.log").write_bytes(output)
        files = artifacts_dir / "files"
    launch = prepared.launch
    taken = collect_outputs(
        prepared.container, prepared.spec.workdir, prepared.base_commit, launch.droppings, launch.artifacts, files
    )
    if taken.patch is None:
        return Collected("", tuple(taken.artifacts), taken.error)
    return Collected(taken.patch, tuple(taken.artifacts))


def finish(prepared: Prepared, artifacts_dir: Path | None, output: bytes | None) -> Collected:
    """`collect`, and the container removed whatever happens. A runtime that cannot be reached (Docker down) makes
    it a collection error, never an exception; a container it could not remove stays the runtime's to remove.

    The removal goes on in the background (`Container.remove` ``wait=False``): nothing after POSTRUN's collection
    needs the container gone, so the evaluation's container starts while this one is still being removed."""
    try:
        return collect(prepared, artifacts_dir, output)
    except Exception as exc:
        return Collected("", (), f"collecting the session failed: {exc or type(exc).__name__}")
    finally:
        try:
            prepared.container.remove(wait=False)
        except Exception as exc:
            log.warning("session %s: removing its container failed: %s", prepared.spec.session_id, exc)


def discard(prepared: Prepared) -> None:
    prepared.container.remove()


def run_session(
    runtime: Runtime,
    spec: SessionSpec,
    wiring: Wiring,
    artifacts_dir: Path | None = None,
    after_run: Callable[[Container], None] | None = None,
) -> SessionOutcome:
    """All five steps for one session; the container is removed whatever happens (also on KeyboardInterrupt).

    ``after_run`` sees the container after the harness stopped and before POSTRUN (tests, in-place evaluation).
    """
    timings: dict[str, float] = {}
    start = time.monotonic()

    stripped: Stripped | None = None

    def outcome(status: SessionStatus, **kw: object) -> SessionOutcome:
        timings["total"] = time.monotonic() - start
        return _outcome(spec, status, timings, stripped=stripped, **kw)  # type: ignore[arg-type]

    try:
        prepared = prepare(runtime, spec, wiring)
    except RuntimeFailure as exc:
        timings["init"] = time.monotonic() - start
        return outcome("init_error", error=str(exc))
    timings["create"] = prepared.created
    timings["init"] = time.monotonic() - start
    stripped = prepared.stripped
    try:
        run_start = time.monotonic()
        harness_run = run(prepared, start + spec.timeout - run_start)
        timings["run"] = time.monotonic() - run_start
        post_start = time.monotonic()
        if after_run is not None:
            after_run(prepared.container)
        collected = collect(prepared, artifacts_dir, harness_run.output)
        timings["postrun"] = time.monotonic() - post_start
    finally:
        discard(prepared)
    output = harness_run.output[-OUTPUT_TAIL:].decode("utf-8", errors="replace")
    if collected.error is not None:
        return outcome(
            "postrun_error",
            exit_code=harness_run.exit_code,
            base_commit=prepared.base_commit,
            output=output,
            error=collected.error,
        )
    return outcome(
        harness_run.status,
        exit_code=harness_run.exit_code,
        patch=collected.patch,
        base_commit=prepared.base_commit,
        output=output,
        artifacts=collected.artifacts,
        error=harness_run.error,
    )


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
    stripped: Stripped | None = None,
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
        stripped,
    )
