"""DockerRuntime's own logic on a fake docker API: owners and the sweep, exec's deadline and output, create options."""

from __future__ import annotations

import io
import os
import socket
import struct
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import docker.errors
import pytest

from polar_cli.errors import RuntimeFailure
from polar_cli.runtime.base import MANAGED_LABEL, OWNER_LABEL, ROLE_LABEL, ContainerSpec
from polar_cli.runtime.docker import EXEC_DIR, DockerRuntime, owner_alive, owner_token, process_start_time
from polar_cli.runtime.execution import KILL_SCRIPT, WRAP_SCRIPT

HOST = socket.gethostname()


def frame(payload: bytes) -> bytes:
    return struct.pack(">BxxxL", 1, len(payload)) + payload


class FakeSocket:
    """Serves scripted chunks; None means "nothing arrives" (a socket timeout)."""

    def __init__(self, chunks: Sequence[bytes | None]) -> None:
        self.chunks = list(chunks)
        self.closed = False

    def settimeout(self, seconds: float) -> None:
        self.timeout = seconds

    def recv(self, size: int) -> bytes:
        if not self.chunks:
            return b""
        chunk = self.chunks.pop(0)
        if chunk is None:
            self.chunks.insert(0, None)
            raise TimeoutError
        return chunk

    def close(self) -> None:
        self.closed = True


class FakeAPI:
    def __init__(self) -> None:
        self.execs: list[list[str]] = []
        self.sockets: list[FakeSocket] = []
        self.exit_code = 0
        self.removed: list[str] = []
        self.containers_list: list[dict[str, Any]] = []
        self.created: dict[str, Any] = {}
        self.archives: list[bytes] = []
        # what get_archive serves: path -> bytes (anything else is not there)
        self.files: dict[str, bytes] = {}
        self.kill_hangs = False

    def exec_create(self, cid: str, cmd: list[str], **kw: Any) -> dict[str, str]:
        self.execs.append(cmd)
        return {"Id": f"exec{len(self.execs)}"}

    def exec_start(self, exec_id: str, socket: bool = False, detach: bool = False) -> Any:
        if not socket and not detach:
            raise AssertionError("an exec started neither detached nor as a socket blocks until it ends")
        return self.sockets.pop(0) if socket else b""

    def exec_inspect(self, exec_id: str) -> dict[str, Any]:
        # execs whose command is the kill script never end while ``kill_hangs`` (a container starved at its limit)
        kill = self.execs[int(exec_id.removeprefix("exec")) - 1][:3] == ["/bin/sh", "-c", KILL_SCRIPT]
        return {"Running": kill and self.kill_hangs, "ExitCode": self.exit_code}

    def put_archive(self, cid: str, path: str, data: bytes) -> bool:
        self.archives.append(data)
        return True

    def get_archive(self, cid: str, path: str) -> tuple[list[bytes], dict[str, Any]]:
        if path not in self.files:
            raise docker.errors.NotFound(f"no such file {path}")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(path.rsplit("/", 1)[-1])
            info.size = len(self.files[path])
            tar.addfile(info, io.BytesIO(self.files[path]))
        return [buf.getvalue()], {}

    def create_host_config(self, **kw: Any) -> dict[str, Any]:
        return kw

    def create_container(self, image: str, **kw: Any) -> dict[str, str]:
        self.created = {"image": image, **kw}
        return {"Id": "c1"}

    def start(self, cid: str) -> None:
        pass

    def remove_container(self, cid: str, **kw: Any) -> None:
        if cid == "gone":
            raise docker.errors.NotFound("no such container")
        self.removed.append(cid)

    def containers(self, **kw: Any) -> list[dict[str, Any]]:
        return self.containers_list

    def pull(self, repository: str, tag: str) -> None:
        if repository.startswith("unreachable"):
            raise docker.errors.APIError("registry unreachable")
        self.pulled = (repository, tag)

    def tag(self, source: str, repository: str, tag: str) -> bool:
        if source == "missing":
            raise docker.errors.APIError("no such image")
        self.tagged = (source, repository, tag)
        return True


class FakeClient:
    def __init__(self) -> None:
        self.api = FakeAPI()


@pytest.fixture
def fake() -> Iterator[tuple[DockerRuntime, FakeAPI]]:
    client = FakeClient()
    runtime = DockerRuntime(client, kill_grace=0.2)
    yield runtime, client.api
    runtime.close()


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_owner_token_and_liveness() -> None:
    me = owner_token()
    assert me == f"{HOST}:{os.getpid()}:{process_start_time(os.getpid())}"
    assert owner_alive(me)
    assert not owner_alive(f"{HOST}:{dead_pid()}:1")
    # a reused pid: alive, but not the process that owned the container
    assert not owner_alive(f"{HOST}:{os.getpid()}:1")
    assert owner_alive(f"another-host:{dead_pid()}:1")
    assert owner_alive("garbage")


def test_start_labels_limits_and_bundles(fake: tuple[DockerRuntime, FakeAPI]) -> None:
    runtime, api = fake
    spec = ContainerSpec(
        image="img", role="session", env={"A": "1"}, volumes_from=("bundle-pi",), cpus=1.5, memory_bytes=1 << 30
    )
    container = runtime.start(spec)
    assert container.id == "c1" and runtime.live() == ["c1"]
    created = api.created
    assert created["labels"] == {MANAGED_LABEL: "1", ROLE_LABEL: "session", OWNER_LABEL: runtime.owner}
    assert created["environment"] == {"A": "1"} and created["working_dir"] == "/testbed"
    host = created["host_config"]
    assert host["volumes_from"] == ["bundle-pi:ro"]
    assert host["nano_cpus"] == 1_500_000_000 and host["mem_limit"] == 1 << 30
    assert host["network_mode"] == "host" and host["init"] is True
    container.remove()
    container.remove()
    assert api.removed == ["c1", "c1"] and runtime.live() == []


def test_a_removal_left_to_the_background_is_the_runtimes_until_it_is_done(
    fake: tuple[DockerRuntime, FakeAPI],
) -> None:
    runtime, api = fake
    started = threading.Event()
    release = threading.Event()
    remove = api.remove_container

    def slow(cid: str, **kw: Any) -> None:
        started.set()
        release.wait(5)
        remove(cid, **kw)

    api.remove_container = slow  # type: ignore[method-assign]
    container = runtime.start(ContainerSpec(image="img"))
    container.remove(wait=False)  # returns at once
    assert started.wait(5) and runtime.live() == ["c1"] and api.removed == []
    release.set()
    runtime.settle()
    assert api.removed == ["c1"] and runtime.live() == []


def test_a_background_removal_that_fails_is_tried_again_at_close(fake: tuple[DockerRuntime, FakeAPI]) -> None:
    runtime, api = fake
    remove = api.remove_container
    calls: list[str] = []

    def flaky(cid: str, **kw: Any) -> None:
        calls.append(cid)
        if len(calls) == 1:
            response = type("Response", (), {"status_code": 500, "url": "/containers/c1", "reason": "busy"})()
            raise docker.errors.APIError("busy", response=response)
        remove(cid, **kw)

    api.remove_container = flaky  # type: ignore[method-assign]
    runtime.start(ContainerSpec(image="img")).remove(wait=False)
    runtime.settle()
    assert runtime.live() == ["c1"] and api.removed == []  # logged, and still the runtime's
    runtime.close()
    assert calls == ["c1", "c1"] and api.removed == ["c1"] and runtime.live() == []


def test_sweep_spares_bundles_live_owners_and_other_hosts(fake: tuple[DockerRuntime, FakeAPI]) -> None:
    runtime, api = fake
    dead = f"{HOST}:{dead_pid()}:1"
    api.containers_list = [
        {"Id": "orphan", "Labels": {OWNER_LABEL: dead, ROLE_LABEL: "session"}},
        {"Id": "mine", "Labels": {OWNER_LABEL: runtime.owner, ROLE_LABEL: "session"}},
        {"Id": "bundle", "Labels": {ROLE_LABEL: "bundle"}},
        {"Id": "remote", "Labels": {OWNER_LABEL: f"elsewhere:{dead_pid()}:1", ROLE_LABEL: "eval"}},
        {"Id": "gone", "Labels": {OWNER_LABEL: dead, ROLE_LABEL: "eval"}},
    ]
    assert runtime.sweep() == 2
    assert api.removed == ["orphan"]


def test_exec_collects_frames_and_the_exit_code(fake: tuple[DockerRuntime, FakeAPI]) -> None:
    runtime, api = fake
    container = runtime.start(ContainerSpec(image="img"))
    data = frame(b"hello ") + frame(b"world")
    sock = FakeSocket([data[:5], data[5:]])
    api.sockets = [sock]
    api.exit_code = 3
    result = container.exec(["echo", "x"], timeout=5, stdin=b"in")
    assert (result.exit_code, result.output, result.timed_out) == (3, b"hello world", False)
    assert sock.closed
    wrapped = api.execs[0]
    assert wrapped[:3] == ["/bin/sh", "-c", WRAP_SCRIPT] and wrapped[-2:] == ["echo", "x"]
    assert not result.oom_killed and not result.over_limit and result.output_size == len(b"hello world")
    # the stdin bytes went in as a file named in the wrapper's arguments
    with tarfile.open(fileobj=io.BytesIO(api.archives[0])) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    stdin_name = wrapped[wrapped.index("-c") + 3].lstrip("/")
    assert files[stdin_name] == b"in"


def test_an_exec_without_stdin_copies_nothing_in_first(fake: tuple[DockerRuntime, FakeAPI]) -> None:
    """The wrapper writes its own pidfile, making its directory: no archive round trip before the exec."""
    runtime, api = fake
    container = runtime.start(ContainerSpec(image="img"))
    api.sockets = [FakeSocket([frame(b"ok")])]
    assert container.exec(["true"], timeout=5).output == b"ok"
    assert api.archives == []
    pidfile = api.execs[0][api.execs[0].index("-c") + 2]
    assert pidfile.startswith(f"{EXEC_DIR}/") and 'mkdir -p "${0%/*}"' in WRAP_SCRIPT


def test_exec_deadline_kills_and_reports_a_timeout(fake: tuple[DockerRuntime, FakeAPI]) -> None:
    runtime, api = fake
    container = runtime.start(ContainerSpec(image="img"))
    api.sockets = [FakeSocket([frame(b"partial"), None])]
    result = container.exec(["sleep", "100"], timeout=0.3)
    assert result.timed_out and result.exit_code is None
    assert result.output == b"partial"
    assert api.execs[1][:3] == ["/bin/sh", "-c", KILL_SCRIPT]
    assert api.execs[1][3] == api.execs[0][api.execs[0].index("-c") + 2]  # the same pidfile


def test_a_kill_that_itself_hangs_is_waited_for_at_most_the_kill_grace(fake: tuple[DockerRuntime, FakeAPI]) -> None:
    runtime, api = fake
    api.kill_hangs = True
    container = runtime.start(ContainerSpec(image="img"))
    api.sockets = [FakeSocket([frame(b"partial"), None])]
    start = time.monotonic()
    result = container.exec(["sleep", "100"], timeout=0.3)
    assert result.timed_out and result.exit_code is None
    # the deadline, the kill's grace and the grace of reading what is left: bounded, whatever the kill exec does
    assert time.monotonic() - start < 0.3 + 2 * runtime.kill_grace + 1.0


def test_removal_errors_other_than_gone_are_reported(fake: tuple[DockerRuntime, FakeAPI]) -> None:
    runtime, api = fake

    def refuse(cid: str, **kw: Any) -> None:
        response = type("Response", (), {"status_code": 500, "url": "/containers/c9", "reason": "boom"})()
        raise docker.errors.APIError("boom", response=response)

    api.remove_container = refuse  # type: ignore[method-assign]
    with pytest.raises(RuntimeFailure, match="removing container"):
        runtime.remove("c9")


def test_pull_and_tag_split_names_and_fail_as_runtime_failures(fake: tuple[DockerRuntime, FakeAPI]) -> None:
    runtime, api = fake
    runtime.pull("localhost:5000/x/y:1")
    assert api.pulled == ("localhost:5000/x/y", "1")
    runtime.pull("debian")
    assert api.pulled == ("debian", "latest")
    with pytest.raises(RuntimeFailure, match="registry unreachable"):
        runtime.pull("unreachable/x:1")
    runtime.tag("polar/x:polar-abc", "demo/x:0.3")
    assert api.tagged == ("polar/x:polar-abc", "demo/x", "0.3")
    with pytest.raises(RuntimeFailure, match="tagging missing as demo/x:1"):
        runtime.tag("missing", "demo/x:1")
