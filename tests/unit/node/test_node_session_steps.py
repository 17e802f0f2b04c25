"""The session steps on executor threads, on a fake runtime: config files written, containers always removed, exit
codes mapped, and a step cancelled mid-thread cleans up after itself."""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from polar_cli.errors import RuntimeFailure
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import SessionSpec
from polar_cli.node.session_steps import Ahead, SessionSteps, in_thread
from tests.support.fake_runtime import BASE, PATCH, FakeRuntime, result, session_responder


def sessions(runtime: FakeRuntime) -> SessionSteps:
    return SessionSteps(runtime, ThreadPoolExecutor(4))


def harness_exiting(exit_code: int | None) -> FakeRuntime:
    harness = result("killed", None, timed_out=True) if exit_code is None else result("harness output", exit_code)
    return FakeRuntime(session_responder(harness))


async def prepare(docker: SessionSteps, harness: str = "codex") -> object:
    spec = SessionSpec(
        session_id="sess-1",
        harness=ADAPTERS[harness],
        image="img:1",
        instruction="Fix it.",
        bundle="bundle-c",
        cpus=2.0,
        memory_bytes=2**30,
        labels={"polar.key": "i::codex::1"},
    )
    return await docker.prepare(spec, Wiring("http://127.0.0.1:9", "sk-key"))


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
    config, mode = container.files["/root/.codex/config.toml"], container.modes["/root/.codex/config.toml"]
    assert b"http://127.0.0.1:9/v1" in config and mode == 0o600
    assert prepared.base_commit == BASE  # type: ignore[attr-defined]
    assert run.status == "ok" and run.exit_code == 0  # type: ignore[attr-defined]
    assert finished.patch == PATCH and finished.error is None  # type: ignore[attr-defined]
    assert (tmp_path / "art" / "harness-output.log").read_bytes() == b"full output"
    assert container.removed == 1


@pytest.mark.parametrize(("exit_code", "status"), [(3, "harness_error"), (None, "timeout")])
def test_run_status_mapping(exit_code: int | None, status: str) -> None:
    runtime = harness_exiting(exit_code)
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
    assert runtime.started[0].removed == 1


def test_finish_removes_the_container_even_when_the_patch_fails(tmp_path: Path) -> None:
    runtime = FakeRuntime()
    docker = sessions(runtime)

    async def go() -> object:
        prepared = await prepare(docker)
        runtime.started[0].fail_patch = True
        return await docker.finish(prepared, None, None)  # type: ignore[arg-type]

    finished = asyncio.run(go())
    assert finished.patch == "" and "bad object" in (finished.error or "")  # type: ignore[attr-defined]
    assert runtime.started[0].removed == 1


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
    assert len(runtime.started) == 1 and runtime.started[0].removed == 1


def test_in_thread_returns_and_raises_like_the_function() -> None:
    pool = ThreadPoolExecutor(1)
    assert asyncio.run(in_thread(pool, lambda: threading.current_thread().name)).startswith("ThreadPoolExecutor")

    def boom() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        asyncio.run(in_thread(pool, boom))


def test_a_step_started_ahead_is_handed_over_once_taken() -> None:
    dropped: list[str] = []

    async def main() -> str | None:
        with ThreadPoolExecutor(1) as pool:
            ahead = Ahead(pool, lambda: "container", dropped.append)
            taken = await ahead.take()
            ahead.release()  # taken: the taker owns it now
            return taken

    assert asyncio.run(main()) == "container" and dropped == []


def test_a_step_started_ahead_and_never_taken_is_dropped_even_while_still_starting() -> None:
    dropped: list[str] = []
    going = threading.Event()

    def slow() -> str:
        going.wait(5.0)
        return "slow"

    async def main() -> None:
        with ThreadPoolExecutor(2) as pool:
            done = Ahead(pool, lambda: "done", dropped.append)
            await asyncio.sleep(0.05)
            done.release()  # there already: dropped at once
            assert dropped == ["done"]
            under_way = Ahead(pool, slow, dropped.append)
            await asyncio.sleep(0.05)
            under_way.release()  # still starting: dropped once its thread returns
            going.set()
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert dropped == ["done", "slow"]


def test_a_step_that_fails_to_start_ahead_hands_over_none() -> None:
    def broken() -> str:
        raise RuntimeFailure("engine hiccup")

    async def main() -> str | None:
        with ThreadPoolExecutor(1) as pool:
            return await Ahead(pool, broken, lambda _: None).take()

    assert asyncio.run(main()) is None
