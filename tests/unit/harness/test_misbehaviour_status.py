"""Misbehaving harnesses without an engine: the exec wrapper on this host, the Docker exec on a fake API, the session's
statuses on the fake runtime, and the rows they become."""

from __future__ import annotations

import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from polar_cli.generate.rows import REASONS, verdict
from polar_cli.harness import ADAPTERS, Wiring
from polar_cli.harness.session import OUTPUT_LIMIT, HarnessRun, SessionSpec, run_session, run_status
from polar_cli.node.pools import RunEnd
from polar_cli.runtime.base import ContainerSpec, ExecResult
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.runtime.execution import STATUS_SUFFIX, CappedBuffer, oom_kills, wrapped_argv
from tests.support.fake_runtime import FakeRuntime, session_responder
from tests.unit.generate.test_generate_rows import facts
from tests.unit.runtime.test_runtime_docker import FakeAPI, FakeClient, FakeSocket, frame

MiB = 1024 * 1024
WIRING = Wiring("http://127.0.0.1:1", "sk-1")


def spec(**kw: object) -> SessionSpec:
    values: dict[str, object] = {
        "session_id": "s1",
        "harness": ADAPTERS["pi"],
        "image": "img",
        "instruction": "do it",
        "bundle": "bundle-pi",
        "timeout": 100.0,
    }
    values.update(kw)
    return SessionSpec(**values)  # type: ignore[arg-type]


# --- the wrapper script, run by this host's /bin/sh


def run_wrapped(script: str, tmp_path: Path, timeout: float = 20) -> tuple[subprocess.CompletedProcess[bytes], float]:
    pidfile = tmp_path / "pid"
    start = time.monotonic()
    done = subprocess.run(
        wrapped_argv(["sh", "-c", script], str(pidfile)), capture_output=True, timeout=timeout, check=False
    )
    return done, time.monotonic() - start


def sleepers(tag: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line.startswith(f"sleep {tag}")]


def test_the_wrapper_returns_when_the_command_exits_and_kills_its_background_children(tmp_path: Path) -> None:
    # the background sleep holds the output pipe: without the group kill, the caller's read would wait 400 s
    # durations no other process on the machine uses (containers' processes show in the host's ps too)
    tag = str(secrets.randbelow(10**6) + 4 * 10**6)
    done, seconds = run_wrapped(f"sleep {tag}1 & sleep {tag}2 >/dev/null 2>&1 & echo started", tmp_path)
    assert (done.returncode, done.stdout) == (0, b"started\n")
    assert seconds < 10
    time.sleep(0.2)
    assert sleepers(tag) == []


def test_the_wrapper_reports_a_signal_as_128_plus_its_number_and_writes_no_status_on_success(tmp_path: Path) -> None:
    done, _ = run_wrapped("kill -9 $$", tmp_path)
    assert done.returncode == 137 and b"did not exit normally" not in done.stderr
    assert (tmp_path / ("pid" + STATUS_SUFFIX)).exists()
    (tmp_path / "ok").mkdir()
    ok, _ = run_wrapped("exit 0", tmp_path / "ok")
    assert ok.returncode == 0 and not (tmp_path / "ok" / ("pid" + STATUS_SUFFIX)).exists()
    three, _ = run_wrapped("exit 3", tmp_path)
    assert three.returncode == 3


def test_oom_kills_reads_the_wrappers_counts() -> None:
    assert oom_kills("0 1\n") and oom_kills("4 6")
    assert not oom_kills("1 1\n") and not oom_kills(" \n") and not oom_kills("") and not oom_kills("x y")


def test_capped_buffer_counts_what_it_drops() -> None:
    buf = CappedBuffer(4)
    for part in (b"abc", b"defg", b"h"):
        buf.add(part)
    assert (buf.value(), buf.total, buf.truncated) == (b"abcd", 8, True)


# --- the Docker exec on a fake engine API


@pytest.fixture
def fake() -> Iterator[tuple[DockerRuntime, FakeAPI]]:
    client = FakeClient()
    runtime = DockerRuntime(client, kill_grace=0.2)
    yield runtime, client.api
    runtime.close()


def test_a_failed_exec_with_an_oom_kill_counted_is_oom_killed(fake: tuple[DockerRuntime, FakeAPI]) -> None:
    runtime, api = fake
    container = runtime.start(ContainerSpec(image="img", memory_bytes=64 * MiB))

    api.sockets = [FakeSocket([frame(b"allocating\n")])]
    api.exit_code = 137
    original = api.exec_create

    def exec_create(cid: str, cmd: list[str], **kw: object) -> dict[str, str]:
        made = original(cid, cmd, **kw)
        api.files[cmd[3] + STATUS_SUFFIX] = b"0 1\n"
        return made

    api.exec_create = exec_create  # type: ignore[method-assign]
    result = container.exec(["perl", "-e", "..."], timeout=5)
    assert (result.exit_code, result.oom_killed, result.timed_out) == (137, True, False)
    # the same exit without a count that moved is a plain failure
    api.sockets = [FakeSocket([b""])]
    api.exec_create = original  # type: ignore[method-assign]
    api.files.clear()
    assert container.exec(["false"], timeout=5).oom_killed is False


def test_output_past_the_containers_limit_kills_the_exec(fake: tuple[DockerRuntime, FakeAPI]) -> None:
    runtime, api = fake
    container = runtime.start(ContainerSpec(image="img", output_limit=10))
    # it keeps writing (and would never end): killed after the limit, not at the deadline
    api.sockets = [FakeSocket([frame(b"0123456789"), frame(b"abcdef"), *[frame(b"more")] * 50, None])]
    start = time.monotonic()
    result = container.exec(["yes"], timeout=30, output_cap=12)
    assert time.monotonic() - start < 5
    assert result.over_limit and not result.timed_out and result.exit_code is None
    assert result.output == b"0123456789ab" and result.truncated and result.output_size >= 16
    assert api.execs[1][:2] == ["/bin/sh", "-c"] and "kill" in api.execs[1][2]
    # without a limit the same output is only capped
    container = runtime.start(ContainerSpec(image="img"))
    api.sockets = [FakeSocket([frame(b"0123456789"), frame(b"abcdef")])]
    result = container.exec(["yes"], timeout=30, output_cap=12)
    assert not result.over_limit and result.exit_code == 0 and result.output_size == 16


# --- the session and its row


def harness_result(exit_code: int | None, **kw: bool) -> ExecResult:
    return ExecResult(exit_code, b"out", kw.pop("timed_out", False), False, 1.0, **kw)


@pytest.mark.parametrize(
    ("result", "status"),
    [
        (harness_result(137, oom_killed=True), "oom"),
        (harness_result(137), "harness_error"),
        (harness_result(0, oom_killed=True), "ok"),
        (harness_result(None, over_limit=True), "output_limit"),
        (harness_result(None, timed_out=True), "timeout"),
    ],
)
def test_run_status_in_its_order(result: ExecResult, status: str) -> None:
    assert run_status(result) == status


def test_an_oom_session_names_the_limit_and_still_collects(tmp_path: Path) -> None:
    runtime = FakeRuntime(session_responder(harness_result(137, oom_killed=True)))
    outcome = run_session(runtime, spec(memory_bytes=512 * MiB), WIRING, tmp_path / "art")
    assert outcome.status == "oom" and outcome.exit_code == 137
    assert outcome.error is not None and "memory limit (512 MiB)" in outcome.error and "137" in outcome.error
    assert outcome.patch and runtime.started[0].removed == 1
    assert runtime.specs[0].memory_bytes == 512 * MiB


def test_the_output_limit_reaches_the_container_and_names_itself(tmp_path: Path) -> None:
    runtime = FakeRuntime(session_responder(harness_result(None, over_limit=True)))
    outcome = run_session(runtime, spec(), WIRING, tmp_path / "art")
    assert runtime.specs[0].output_limit == OUTPUT_LIMIT == 1024 * MiB
    assert outcome.status == "output_limit" and outcome.error is not None and "1 GiB" in outcome.error
    assert outcome.patch and runtime.started[0].removed == 1
    custom = FakeRuntime(session_responder(harness_result(0)))
    run_session(custom, spec(output_limit=None), WIRING)
    assert custom.specs[0].output_limit is None


@pytest.mark.parametrize(
    ("run", "expected"),
    [
        (HarnessRun("oom", 137, b"", 1.0, "out of memory: ... (64 MiB); the harness exited with 137"), "OOM"),
        (HarnessRun("output_limit", None, b"", 1.0, "the harness wrote more than 1 GiB of output"), "OUTPUT_LIMIT"),
    ],
)
def test_oom_and_output_limit_rows_are_rejects_with_their_own_code(run: HarnessRun, expected: str) -> None:
    kind, status, reason = verdict(facts(end=RunEnd("ok", run), harness_run=run))
    assert (kind, status) == ("rejected", expected)
    assert reason is not None and reason == f"{expected.lower()}: {run.error}"
    assert reason.split(":")[0] in REASONS
    # documented in order: after timeout, before harness_error
    codes = list(REASONS)
    assert codes.index("timeout") < codes.index("output_limit") < codes.index("oom") < codes.index("harness_error")


def test_a_harness_that_exits_0_without_a_patch_is_no_patch() -> None:
    from polar_cli.harness.session import Collected

    kind, status, reason = verdict(facts(collected=Collected("", ())))
    assert (kind, status) == ("rejected", "OK") and reason is not None and reason.startswith("no_patch: ")


def test_the_design_table_lists_the_new_codes_in_order() -> None:
    text = (Path(__file__).parents[3] / "docs/design.md").read_text()
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| `")]
    order = [r for r in rows if r in ("`timeout`", "`output_limit`", "`oom`", "`harness_error`")]
    assert order == ["`timeout`", "`output_limit`", "`oom`", "`harness_error`"]
