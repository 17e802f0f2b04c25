"""`Runtime` on the docker SDK: labelled containers that are always removed, exec with a deadline and an output cap.

Ownership: every container carries `polar.owner=<host>:<pid>:<process start time>`. A runtime removes its own
containers on `close()` (also registered with atexit, so Ctrl-C and uncaught exceptions clean up), and `sweep()` removes
containers whose owner process on this host is gone (a crash or SIGKILL). Bundle data containers (`polar.role=bundle`)
are long-lived and never swept. A container whose work is over can be removed in the background (`remove(wait=False)`,
`DockerRuntime.remove_later`): it stays the runtime's until it is gone, and `close()` waits for those removals first
(`settle`).

Exec: argv runs under `setsid` in its own process group, stdin from a file (never a terminal); output is read from
the raw exec connection with socket timeouts against the deadline; at the deadline, or once its output passes the
container's `ContainerSpec.output_limit`, the group and its descendants are SIGKILLed from a second exec (see
`execution`). When argv's own process exits, the wrapper kills what is left of its group, so background children
never hold the exec open. An exec that failed reads the wrapper's OOM-kill counts: `ExecResult.oom_killed`.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import os
import secrets
import socket
import tarfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import PurePosixPath
from typing import Any

from polar_cli.errors import RuntimeFailure
from polar_cli.runtime.base import (
    MANAGED_LABEL,
    OWNER_LABEL,
    ROLE_LABEL,
    ContainerSpec,
    ExecResult,
    Log,
    network_mode,
)
from polar_cli.runtime.execution import STATUS_SUFFIX, CappedBuffer, FrameDecoder, kill_argv, oom_kills, wrapped_argv

# How long an exec may keep streaming after its process group was killed (a stuck mount, a zombie) before we give up.
KILL_GRACE = 5.0
EXEC_DIR = "/tmp/.polar-exec"
# threads that remove containers in the background (`DockerRuntime.remove_later`): a few, so that they never hold
# more of the docker client's connection pool than a few
REMOVERS = 4

log = logging.getLogger("polar.runtime")


def connect(timeout: float = 120.0) -> Any:
    """A docker client that has answered a ping, or a RuntimeFailure saying how to get an engine."""
    import docker
    import docker.errors

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise RuntimeFailure(
            f"no Docker engine answers at {where} ({exc}); run scripts/setup-docker to install and start one"
        ) from exc
    return client


def process_start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat (boot-relative start time): tells a live owner from a reused pid."""
    try:
        stat = open(f"/proc/{pid}/stat", "rb").read().decode(errors="replace")  # noqa: SIM115
    except OSError:
        return None
    # comm (field 2) may hold spaces and parentheses: split after its closing one
    return stat.rsplit(")", 1)[1].split()[19]


def owner_token(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{process_start_time(pid) or '?'}"


def owner_alive(token: str, hostname: str | None = None) -> bool:
    """Whether the process a container's owner label names still runs; other hosts' owners are assumed alive."""
    host, _, rest = token.partition(":")
    pid_text, _, started = rest.partition(":")
    if host != (hostname or socket.gethostname()) or not pid_text.isdigit():
        return True
    current = process_start_time(int(pid_text))
    return current is not None and (started == "?" or current == started)


class DockerContainer:
    """One running container; see `base.Container` for the contract."""

    def __init__(self, runtime: DockerRuntime, container_id: str, name: str, output_limit: int | None = None) -> None:
        self.id = container_id
        self.name = name
        self._runtime = runtime
        self._api = runtime.client.api
        self.output_limit = output_limit

    def exec(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: bytes | None = None,
        output_cap: int = 8 * 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> ExecResult:
        start = time.monotonic()
        token = secrets.token_hex(6)
        pidfile = f"{EXEC_DIR}/{token}.pid"  # the wrapper writes it, making EXEC_DIR when it is missing
        stdin_path = "/dev/null"
        if stdin is not None:
            stdin_path = f"{EXEC_DIR}/{token}.stdin"
            self.put_files({stdin_path: stdin}, mode=0o600)
        exec_id = self._api.exec_create(
            self.id,
            wrapped_argv(argv, pidfile, stdin_path),
            environment=dict(env or {}),
            workdir=workdir,
        )["Id"]
        sock = self._api.exec_start(exec_id, socket=True)
        raw = getattr(sock, "_sock", sock)
        output = CappedBuffer(output_cap)
        # ``timeout`` runs on ``clock``: one that stands still while the gateway is paused credits the pause
        deadline = clock() + timeout
        ended = _pump(raw, output, deadline, self.output_limit, clock)
        if ended != "eof":
            self._kill(pidfile)
            _pump(raw, output, time.monotonic() + self._runtime.kill_grace)
        with contextlib.suppress(OSError):
            raw.close()
        exit_code = self._exit_code(exec_id) if ended == "eof" else None
        oom = exit_code not in (0, None) and self._oom_killed(pidfile)
        return ExecResult(
            exit_code,
            output.value(),
            ended == "deadline",
            output.truncated,
            time.monotonic() - start,
            oom_killed=oom,
            over_limit=ended == "limit",
            output_size=output.total,
        )

    def _oom_killed(self, pidfile: str) -> bool:
        """Whether the wrapper counted an OOM kill in the container while the failed command ran."""
        import docker.errors

        try:
            status = self.get_file(pidfile + STATUS_SUFFIX)
        except (FileNotFoundError, KeyError, tarfile.TarError, docker.errors.APIError, RuntimeFailure):
            return False
        return oom_kills(status.decode(errors="replace"))

    def _kill(self, pidfile: str) -> None:
        """Kill the exec's process group from a second exec, waiting for that at most the kill grace: under memory
        pressure (a container at its limit, a loaded host) the kill exec itself can stall, and an unbounded wait on
        its output hung the whole session (and the run's shutdown) for good."""
        exec_id = self._api.exec_create(self.id, kill_argv(pidfile))["Id"]
        self._api.exec_start(exec_id, detach=True)
        deadline = time.monotonic() + self._runtime.kill_grace
        while time.monotonic() < deadline:
            if not self._api.exec_inspect(exec_id).get("Running"):
                return
            time.sleep(0.05)

    def _exit_code(self, exec_id: str) -> int | None:
        # the stream can end a moment before the engine records the exit
        for _ in range(100):
            info = self._api.exec_inspect(exec_id)
            if not info.get("Running"):
                code = info.get("ExitCode")
                return int(code) if code is not None else None
            time.sleep(0.02)
        return None

    def put_files(self, files: Mapping[str, bytes], mode: int = 0o644) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for path, data in files.items():
                if not path.startswith("/"):
                    raise ValueError(f"put_files: {path!r} is not an absolute path")
                info = tarfile.TarInfo(path.lstrip("/"))
                info.size = len(data)
                info.mode = mode
                info.mtime = int(time.time())
                tar.addfile(info, io.BytesIO(data))
        if not self._api.put_archive(self.id, "/", buf.getvalue()):
            raise RuntimeFailure(f"writing {len(files)} file(s) into {self.name} failed")

    def get_file(self, path: str) -> bytes:
        import docker.errors

        try:
            stream, _stat = self._api.get_archive(self.id, path)
        except docker.errors.NotFound as exc:
            raise FileNotFoundError(path) from exc
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream)), mode="r:") as tar:
            member = tar.getmember(PurePosixPath(path).name)
            fh = tar.extractfile(member)
            if fh is None:
                raise IsADirectoryError(path)
            return fh.read()

    def remove(self, *, wait: bool = True) -> None:
        if wait:
            self._runtime.remove(self.id)
        else:
            self._runtime.remove_later(self.id)


def _pump(
    sock: Any,
    output: CappedBuffer,
    deadline: float,
    limit: int | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> str:
    """Read frames into output until "eof", the "deadline" (on ``clock``), or more than ``limit`` bytes in all
    ("limit")."""
    decoder = FrameDecoder()
    while True:
        if limit is not None and output.total > limit:
            return "limit"
        left = deadline - clock()
        if left <= 0:
            return "deadline"
        sock.settimeout(min(left, 1.0))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            return "eof"  # the engine closed the connection: the process is gone
        if not chunk:
            return "eof"
        for payload in decoder.feed(chunk):
            output.add(payload)


def bind_list(binds: Mapping[str, str]) -> list[str]:
    """`ContainerSpec.binds` as Docker's ``host:container:ro`` strings."""
    for host, inside in binds.items():
        if not (host.startswith("/") and inside.startswith("/")) or ":" in host + inside:
            raise RuntimeFailure(f"bind mount {host!r} -> {inside!r}: both must be absolute paths without ':'")
    return [f"{host}:{inside}:ro" for host, inside in binds.items()]


def host_config_args(spec: ContainerSpec) -> dict[str, Any]:
    """The Docker host config of ``spec``'s container: network, mounts, limits and its sandbox (docs/security.md)."""
    sandbox = spec.sandbox
    args: dict[str, Any] = {
        "network_mode": network_mode(spec.network),
        "volumes_from": [f"{c}:ro" for c in spec.volumes_from],
        "binds": bind_list(spec.binds) or None,
        "nano_cpus": int(spec.cpus * 1e9) if spec.cpus else None,
        "mem_limit": spec.memory_bytes,
        # no swap beyond the memory limit: a memory hog meets the OOM killer instead of thrashing the host
        "memswap_limit": spec.memory_bytes,
        "init": True,  # reaps the zombies a killed harness leaves behind
        "pids_limit": sandbox.pids_limit,
        "security_opt": ["no-new-privileges:true"] if sandbox.no_new_privileges else None,
    }
    if sandbox.capabilities is not None:
        args.update(cap_drop=["ALL"], cap_add=list(sandbox.capabilities))
    return args


class DockerRuntime:
    """Starts containers on a docker engine; removes every one of them on `close()` or at interpreter exit."""

    def __init__(self, client: Any | None = None, *, kill_grace: float = KILL_GRACE) -> None:
        self.client = client if client is not None else connect()
        self.owner = owner_token()
        self.kill_grace = kill_grace
        self._live: dict[str, str] = {}
        self._lock = threading.Lock()
        # the threads of `remove_later`, started on first need, and the removals they have not finished
        self._remover: ThreadPoolExecutor | None = None
        self._removing: set[Future[None]] = set()
        atexit.register(self.close)

    def start(self, spec: ContainerSpec) -> DockerContainer:
        import docker.errors

        name = f"polar-{spec.role}-{secrets.token_hex(5)}"
        labels = {**spec.labels, MANAGED_LABEL: "1", ROLE_LABEL: spec.role, OWNER_LABEL: self.owner}
        host_config = self.client.api.create_host_config(**host_config_args(spec))
        try:
            created = self.client.api.create_container(
                spec.image,
                # the main process only keeps the container up (or is the relay); work happens in execs
                entrypoint=list(spec.command[:1]) or ["sleep"],
                command=list(spec.command[1:]) if spec.command else ["infinity"],
                environment=dict(spec.env),
                labels=labels,
                name=name,
                working_dir=spec.workdir,
                host_config=host_config,
            )
        except docker.errors.ImageNotFound as exc:
            raise RuntimeFailure(f"image {spec.image} is not present (polar images build ...)") from exc
        except docker.errors.APIError as exc:
            raise RuntimeFailure(f"creating a container from {spec.image}: {exc.explanation or exc}") from exc
        container_id = str(created["Id"])
        with self._lock:
            self._live[container_id] = name
        try:
            self.client.api.start(container_id)
        except docker.errors.APIError as exc:
            self.remove(container_id)
            raise RuntimeFailure(f"starting {name} from {spec.image}: {exc.explanation or exc}") from exc
        return DockerContainer(self, container_id, name, spec.output_limit)

    def remove(self, container_id: str) -> None:
        import docker.errors

        try:
            self.client.api.remove_container(container_id, force=True, v=True)
        except docker.errors.APIError as exc:
            # 404: already gone; 409: a removal is already in progress
            if not isinstance(exc, docker.errors.NotFound) and exc.status_code not in (404, 409):
                raise RuntimeFailure(f"removing container {container_id[:12]}: {exc}") from exc
        with self._lock:
            self._live.pop(container_id, None)

    def remove_later(self, container_id: str) -> None:
        """`remove` on a background thread: the caller goes on at once. The container stays in `live()` until it is
        gone, so `close()` (which first waits for the removals under way: `settle`) and, after a crash, `sweep()`
        still find it; a removal that fails is logged and left to `close()`."""
        with self._lock:
            if self._remover is None:
                self._remover = ThreadPoolExecutor(REMOVERS, thread_name_prefix="polar-remove")
            try:
                future = self._remover.submit(self._remove_logged, container_id)
            except RuntimeError:  # the interpreter is shutting down: no new threads
                future = None
            if future is not None:
                self._removing.add(future)
        if future is None:
            self.remove(container_id)
        else:
            future.add_done_callback(self._removed)

    def _remove_logged(self, container_id: str) -> None:
        try:
            self.remove(container_id)
        except Exception as exc:
            log.warning("removing container %s failed (trying again at exit): %s", container_id[:12], exc)

    def _removed(self, future: Future[None]) -> None:
        with self._lock:
            self._removing.discard(future)

    def settle(self) -> None:
        """Wait until the background removals under way (`remove_later`) have ended."""
        with self._lock:
            pending = list(self._removing)
        wait(pending)

    def image_exists(self, image: str) -> bool:
        from polar_cli.runtime.images import image_exists

        return image_exists(self.client, image)

    def pull(self, image: str) -> None:
        from polar_cli.runtime.images import split_image

        repository, tag = split_image(image)
        try:
            self.client.api.pull(repository, tag=tag)
        except Exception as exc:  # docker-py raises APIError, ImageNotFound, requests and socket errors alike
            raise RuntimeFailure(str(exc)) from exc

    def build(
        self, files: Mapping[str, bytes], tag: str, *, buildargs: Mapping[str, str] | None = None, log: Log = print
    ) -> None:
        from polar_cli.runtime.images import build_image

        build_image(self.client, files, tag, buildargs=buildargs, log=log)

    def tag(self, source: str, target: str) -> None:
        import docker.errors

        from polar_cli.runtime.images import split_image

        repository, tag = split_image(target)
        try:
            self.client.api.tag(source, repository, tag=tag)
        except docker.errors.APIError as exc:
            raise RuntimeFailure(f"tagging {source} as {target}: {exc.explanation or exc}") from exc

    def base_image(self, *, log: Log = print) -> str:
        from polar_cli.runtime.images import ensure_base_image

        return ensure_base_image(self.client, log=log).image

    def bundle(self, harness: str, *, build: bool = True, log: Log = print) -> str:
        """The bundle data container of ``harness`` (its image built first when ``build`` and missing)."""
        from polar_cli.runtime.images import ensure_bundle_container, ensure_harness_image, harness_image_plan

        if build:
            tag = ensure_harness_image(self.client, harness, log=log).image
        else:
            tag = harness_image_plan(harness).tag
            if not self.image_exists(tag):
                raise RuntimeFailure(f"harness bundle {tag} is missing (polar images build harness {harness})")
        return ensure_bundle_container(self.client, tag)

    def relay(self, *, build: bool = True, log: Log = print) -> str:
        """The relay's data container (gateway-only sandboxes mount it); its image built first if missing and
        ``build``."""
        from polar_cli.runtime.images import ensure_bundle_container, ensure_relay_image, relay_image_plan

        if build:
            tag = ensure_relay_image(self.client, log=log).image
        else:
            tag = relay_image_plan().tag
            if not self.image_exists(tag):
                raise RuntimeFailure(f"the gateway-only relay image {tag} is missing (scripts/setup-docker builds it)")
        return ensure_bundle_container(self.client, tag)

    def bundle_image(self, image: str) -> str:
        """The data container of a prebuilt bundle image (pulled when missing); its VOLUMEs are what gets mounted."""
        from polar_cli.runtime.images import ensure_bundle_container

        if not self.image_exists(image):
            try:
                self.pull(image)
            except RuntimeFailure as exc:
                raise RuntimeFailure(f"bundle image {image} is not present and pulling it failed: {exc}") from exc
        return ensure_bundle_container(self.client, image)

    def sweep(self) -> int:
        removed = 0
        for c in self.client.api.containers(all=True, filters={"label": f"{MANAGED_LABEL}=1"}):
            labels = c.get("Labels") or {}
            owner = labels.get(OWNER_LABEL)
            if labels.get(ROLE_LABEL) == "bundle" or owner is None or owner_alive(owner):
                continue
            self.remove(c["Id"])
            removed += 1
        return removed

    def ping(self) -> None:
        """Raise unless the Docker engine answers (`generate.watches`)."""
        self.client.api.ping()

    def live(self) -> list[str]:
        with self._lock:
            return list(self._live)

    def close(self) -> None:
        """Remove every container this runtime started and has not removed yet, once the background removals under
        way have ended."""
        self.settle()
        with self._lock:
            remover, self._remover = self._remover, None
        if remover is not None:
            remover.shutdown(wait=True)
        for container_id in self.live():
            with contextlib.suppress(Exception):
                self.remove(container_id)

    def __enter__(self) -> DockerRuntime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        atexit.unregister(self.close)
