"""The container stages on a fake runtime: config files written, containers always removed, exit codes mapped, and a
step cancelled mid-thread cleans up after itself."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.node.docker_stages import ContainerSettings, DockerSessions, in_thread
from polar_cli.runtime.base import ContainerSpec, ExecResult, RuntimeFailure


@dataclass
class FakeContainer:
    id: str
    spec: ContainerSpec
    files: dict[str, tuple[bytes, int]] = field(default_factory=dict)
    execs: list[Sequence[str]] = field(default_factory=list)
    removed: bool = False
    harness_exit: int | None = 0
    fail_patch: bool = False

    def exec(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        env: Mapping[str, str] | None = None,
        workdir: str | None = None,
        stdin: bytes | None = None,
        output_cap: int = 8 * 1024 * 1024,
    ) -> ExecResult:
        self.execs.append(list(argv))
        script = " ".join(argv)
        if "polar-base" in script:
            return ExecResult(0, b"abc123\n", False, False, 0.01)
        if "polar-patch" in script:
            if self.fail_patch:
                return ExecResult(5, b"fatal: bad object", False, False, 0.01)
            self.files["/tmp/.polar-exec/patch.diff"] = (b"diff --git a/x b/x\n", 0o644)
            return ExecResult(0, b"", False, False, 0.01)
        if "polar-artifacts" in script:
            return ExecResult(0, b"", False, False, 0.01)
        # the harness
        if self.harness_exit is None:
            return ExecResult(None, b"killed", True, False, timeout)
        return ExecResult(self.harness_exit, b"harness output", False, False, 0.01)

    def put_files(self, files: Mapping[str, bytes], mode: int = 0o644) -> None:
        self.files.update({path: (data, mode) for path, data in files.items()})

    def get_file(self, path: str) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path][0]

    def remove(self) -> None:
        self.removed = True


@dataclass
class FakeRuntime:
    started: list[FakeContainer] = field(default_factory=list)
    start_delay: float = 0.0
    harness_exit: int | None = 0
    fail_put: bool = False

    def start(self, spec: ContainerSpec) -> FakeContainer:
        time.sleep(self.start_delay)
        container = FakeContainer(f"c{len(self.started)}", spec, harness_exit=self.harness_exit)
        if self.fail_put:
            container.put_files = self._refuse  # type: ignore[method-assign]
        self.started.append(container)
        return container

    @staticmethod
    def _refuse(files: Mapping[str, bytes], mode: int = 0o644) -> None:
        raise RuntimeFailure("disk full")

    def image_exists(self, image: str) -> bool:
        return True

    def sweep(self) -> int:
        return 0


def sessions(runtime: FakeRuntime) -> DockerSessions:
    return DockerSessions(runtime, ThreadPoolExecutor(4), ContainerSettings(cpus=2.0, memory_bytes=2**30))


async def prepare(docker: DockerSessions, harness: str = "codex") -> object:
    return await docker.prepare(
        "sess-1", ADAPTERS[harness], "img:1", "Fix it.", Wiring("http://127.0.0.1:9", "sk-key"), "bundle-c", None,
        {"polar.key": "i::codex::1"},
    )  # fmt: skip


def test_prepare_run_finish_happy_path(tmp_path: Path) -> None:
    runtime = FakeRuntime()
    docker = sessions(runtime)

    async def go() -> tuple[object, object, object]:
        prepared = await prepare(docker)
        run = await docker.run(prepared, time.monotonic() + 60, None)  # type: ignore[arg-type]
        finished = await docker.finish(prepared, tmp_path / "art", b"full output")  # type: ignore[arg-type]
        return prepared, run, finished

    prepared, run, finished = asyncio.run(go())
    container = runtime.started[0]
    assert container.spec.volumes_from == ("bundle-c",) and container.spec.cpus == 2.0
    assert container.spec.labels["polar.session"] == "sess-1" and container.spec.labels["polar.key"] == "i::codex::1"
    # the harness's config file carries the gateway URL; config files are private to root
    config, mode = container.files["/root/.codex/config.toml"]
    assert b"http://127.0.0.1:9/v1" in config and mode == 0o600
    assert prepared.base_commit == "abc123"  # type: ignore[attr-defined]
    assert run.status == "ok" and run.exit_code == 0  # type: ignore[attr-defined]
    assert finished.patch == "diff --git a/x b/x\n" and finished.error is None  # type: ignore[attr-defined]
    assert (tmp_path / "art" / "harness-output.log").read_bytes() == b"full output"
    assert container.removed


@pytest.mark.parametrize(("exit_code", "status"), [(3, "harness_error"), (None, "timeout")])
def test_run_status_mapping(exit_code: int | None, status: str) -> None:
    runtime = FakeRuntime(harness_exit=exit_code)
    docker = sessions(runtime)

    async def go() -> object:
        prepared = await prepare(docker, "pi")
        return await docker.run(prepared, time.monotonic() + 0.5, 100.0)  # type: ignore[arg-type]

    run = asyncio.run(go())
    assert run.status == status and run.exit_code == exit_code  # type: ignore[attr-defined]


def test_prepare_failure_removes_the_container() -> None:
    runtime = FakeRuntime(fail_put=True)
    with pytest.raises(RuntimeFailure, match="disk full"):
        asyncio.run(prepare(sessions(runtime)))
    assert runtime.started[0].removed


def test_finish_removes_the_container_even_when_the_patch_fails(tmp_path: Path) -> None:
    runtime = FakeRuntime()
    docker = sessions(runtime)

    async def go() -> object:
        prepared = await prepare(docker)
        runtime.started[0].fail_patch = True
        return await docker.finish(prepared, None, None)  # type: ignore[arg-type]

    finished = asyncio.run(go())
    assert finished.patch == "" and "bad object" in (finished.error or "")  # type: ignore[attr-defined]
    assert runtime.started[0].removed


def test_a_cancelled_prepare_removes_the_container_once_its_thread_ends() -> None:
    runtime = FakeRuntime(start_delay=0.3)
    docker = sessions(runtime)

    async def go() -> None:
        task = asyncio.create_task(prepare(docker))
        await asyncio.sleep(0.05)  # the thread is inside runtime.start
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    docker.executor.shutdown(wait=True)
    assert len(runtime.started) == 1 and runtime.started[0].removed


def test_in_thread_returns_and_raises_like_the_function() -> None:
    pool = ThreadPoolExecutor(1)
    assert asyncio.run(in_thread(pool, lambda: threading.current_thread().name)).startswith("ThreadPoolExecutor")

    def boom() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(in_thread(pool, boom))
