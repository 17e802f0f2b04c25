"""Harnesses that misbehave, in real containers: each session ends with its own reason, promptly, and frees its slot.

Each harness is a custom one (`harness.custom`, ``bundle: none``): a shell command run in the base image, so no
gateway call is needed. The cases:

- out of memory: allocates past the container's memory limit; the kernel's OOM killer kills it (exit 137), the
  container's cgroup counts the kill: status ``oom`` (reason ``oom``).
- background processes: starts ``sleep`` in the background (with and without its output redirected) and exits 0:
  the session ends when the harness's own process exits, within seconds, and nothing of it is left afterwards.
- gigabytes of output: writes more than the container's output limit: killed at the limit, status ``output_limit``;
  what the Polar process keeps (and its peak RSS) stays bounded.
- exits 0 having done nothing: status ``ok``, an empty patch, and the row is rejected with ``no_patch``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from polar_cli.generate.rows import REASONS, SessionFacts, build_row, verdict
from polar_cli.harness import Wiring
from polar_cli.harness.custom import CustomHarnessConfig, custom_adapter
from polar_cli.harness.session import Collected, HarnessRun, SessionOutcome, SessionSpec, run_session
from polar_cli.node.pools import RunEnd
from polar_cli.runtime.base import Container, ContainerSpec
from polar_cli.runtime.docker import DockerRuntime
from polar_cli.swe.manifest import Instance
from polar_cli.trajectory import per_request
from tests.integration.harness.test_harness_sessions import session_containers

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
# nothing listens here: these harnesses never call the gateway
WIRING = Wiring("http://127.0.0.1:9", "sk-unused")
# processes of the container other than its init, its main `sleep infinity` and the `ps` that lists them
LIST_LEFTOVERS = ["sh", "-c", "ps -eo pid=,args= | grep -v -e docker-init -e 'sleep infinity' -e ' ps ' -e grep"]


def harness(script: str) -> Any:
    config = CustomHarnessConfig.model_validate({"api": "openai-chat", "bundle": "none", "argv": ["sh", "-c", script]})
    return custom_adapter("misbehaving", config)


def spec(image: str, name: str, script: str, **kw: Any) -> SessionSpec:
    return SessionSpec(f"it-misbehave-{name}-{time.time_ns()}", harness(script), image, "Fix it.", None, **kw)


def session(
    runtime: DockerRuntime, image: str, name: str, script: str, tmp_path: Path, **kw: Any
) -> tuple[SessionOutcome, float, list[str]]:
    """Run one session; (its outcome, wall seconds, the container's leftover processes right after the run)."""
    seen: dict[str, list[str]] = {}

    def leftovers(container: Container) -> None:
        out = container.exec(LIST_LEFTOVERS, timeout=30).output.decode()
        seen["left"] = [line.strip() for line in out.splitlines() if line.strip()]

    s = spec(image, name, script, **kw)
    start = time.monotonic()
    outcome = run_session(runtime, s, WIRING, tmp_path / "artifacts", after_run=leftovers)
    seconds = time.monotonic() - start
    assert session_containers(runtime, s.session_id) == [], "the session's container was not removed"
    return outcome, seconds, seen.get("left", [])


def test_a_harness_killed_at_the_memory_limit_ends_oom(runtime: DockerRuntime, base_image: str, tmp_path: Path) -> None:
    # perl is in the base image (python3 is not): a 512 MiB string under a 64 MiB limit
    script = "echo allocating; exec perl -e '$x = q(a) x (512*1024*1024); print qq(survived\\n)'"
    outcome, seconds, _ = session(runtime, base_image, "oom", script, tmp_path, memory_bytes=64 * MiB, timeout=120)
    assert outcome.status == "oom", f"{outcome.status} ({outcome.error}): {outcome.output!r}"
    assert outcome.exit_code == 137
    assert outcome.error is not None and "memory" in outcome.error and "64 MiB" in outcome.error
    assert "survived" not in outcome.output and "allocating" in outcome.output
    assert seconds < 60, seconds


def test_a_harness_that_exits_non_zero_under_a_memory_limit_is_not_oom(
    runtime: DockerRuntime, base_image: str, tmp_path: Path
) -> None:
    # a plain failure, and a plain SIGKILL of its own, are the harness's errors: no OOM kill was counted
    outcome, _, _ = session(runtime, base_image, "notoom", "exit 3", tmp_path, memory_bytes=64 * MiB, timeout=60)
    assert (outcome.status, outcome.exit_code) == ("harness_error", 3)
    outcome, _, _ = session(runtime, base_image, "kill9", "kill -9 $$", tmp_path, memory_bytes=64 * MiB, timeout=60)
    assert (outcome.status, outcome.exit_code) == ("harness_error", 137)


@pytest.mark.parametrize(
    "background",
    [
        "sleep 10000 &",
        "sleep 10000 >/dev/null 2>&1 </dev/null &",
        "(while :; do sleep 1; echo tick; done) &",
    ],
    ids=["holding-output", "redirected", "writing-forever"],
)
def test_background_processes_end_with_the_harness(
    runtime: DockerRuntime, base_image: str, tmp_path: Path, background: str
) -> None:
    outcome, seconds, left = session(
        runtime, base_image, "bg", f"{background} echo started; echo change >> /testbed/bg.txt", tmp_path, timeout=90
    )
    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}): {outcome.output!r}"
    assert "started" in outcome.output and "+change" in outcome.patch
    # ended when the harness's own process exited, not at the timeout
    assert outcome.timings["run"] < 15, outcome.timings
    assert seconds < 60, seconds
    # its process group went with it: nothing of the harness survives into POSTRUN
    assert left == [], left


def test_a_background_process_in_its_own_session_does_not_hold_the_run(
    runtime: DockerRuntime, base_image: str, tmp_path: Path
) -> None:
    # setsid escapes the process group; the run still ends with the harness, and the container's removal ends it
    outcome, _, _ = session(runtime, base_image, "setsid", "setsid sleep 10000 & echo started", tmp_path, timeout=90)
    assert outcome.status == "ok", f"{outcome.status} ({outcome.error}): {outcome.output!r}"
    assert outcome.timings["run"] < 15, outcome.timings


@contextmanager
def peak_rss() -> Iterator[dict[str, int]]:
    """The Polar (test) process's peak resident memory over the block, sampled, in bytes above where it started."""
    seen = {"start": 0, "peak": 0}
    stop = threading.Event()

    def rss() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def sample() -> None:
        while not stop.is_set():
            seen["peak"] = max(seen["peak"], rss())
            stop.wait(0.05)

    seen["start"] = seen["peak"] = rss()
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join()
        seen["peak"] = max(seen["peak"], rss())


def test_gigabytes_of_output_stop_at_the_output_limit(
    runtime: DockerRuntime, base_image: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with peak_rss() as rss:
        outcome, seconds, left = session(
            runtime, base_image, "output", "echo change > /testbed/out.txt; yes polar | head -c 3G", tmp_path,
            timeout=300, output_limit=256 * MiB,
        )  # fmt: skip
    grown = rss["peak"] - rss["start"]
    with capsys.disabled():
        print(
            f"\n3 GB of output: {seconds:.1f} s, run {outcome.timings.get('run', 0):.1f} s, RSS +{grown / MiB:.0f} MiB"
        )
    assert outcome.status == "output_limit", f"{outcome.status} ({outcome.error})"
    assert outcome.error is not None and "256 MiB" in outcome.error
    # the patch of the partial session is kept, as for a timeout
    assert "+change" in outcome.patch
    log = (tmp_path / "artifacts" / "harness-output.log").stat().st_size
    assert log <= 8 * MiB + 4096, log
    assert grown < 200 * MiB, f"the Polar process grew by {grown / MiB:.0f} MiB"
    assert left == []


def test_gigabytes_under_the_limit_are_counted_and_kept_bounded(runtime: DockerRuntime, base_image: str) -> None:
    # one exec with output past what is kept but under its container's limit: it runs to its end
    box = runtime.start(ContainerSpec(base_image, workdir="/", output_limit=64 * MiB))
    try:
        result = box.exec(["sh", "-c", "head -c 40000000 /dev/zero; echo tail-end"], timeout=120)
        assert result.exit_code == 0 and not result.over_limit and result.truncated
        assert len(result.output) == 8 * MiB and result.output_size == 40000000 + len("tail-end\n")
        result = box.exec(["head", "-c", "100000000", "/dev/zero"], timeout=120)
        assert result.over_limit and result.exit_code is None and result.output_size >= 64 * MiB
    finally:
        box.remove()


def test_a_harness_that_exits_0_having_done_nothing_is_rejected_no_patch(
    runtime: DockerRuntime, base_image: str, tmp_path: Path
) -> None:
    outcome, seconds, _ = session(runtime, base_image, "nothing", "echo nothing to do; exit 0", tmp_path, timeout=60)
    assert outcome.status == "ok" and outcome.exit_code == 0 and outcome.patch == ""
    assert seconds < 30, seconds
    instance = Instance("demo__nothing-1", "demo/nothing", outcome.base_commit or "", "Fix it.", "P", "T", ("t",), ())
    run = HarnessRun("ok", 0, outcome.output.encode(), outcome.timings["run"])
    facts = SessionFacts(
        key="demo__nothing-1::misbehaving::1", session_id=outcome.session_id, instance=instance,
        harness="misbehaving", attempt=1, model="m", end=RunEnd("ok", run), harness_run=run,
        collected=Collected(outcome.patch, outcome.artifacts), records=[], build=per_request([]), evaluation=None,
    )  # fmt: skip
    kind, status, reason = verdict(facts)
    assert (kind, status) == ("rejected", "OK")
    assert reason is not None and reason.split(":")[0] == "no_patch" and "no_patch" in REASONS
    file, row = build_row(facts, outcome.timings)
    assert file == "rejected" and row["reason"] == reason and row["patch"] == "" and row["exit_code"] == 0
