"""Outages: the watch closes the gate after N failed checks (at once when the dependency is gone), ends sessions in
flight through ``on_down``, recovers by restart or by waiting, gives up with one line; the pools honour the gate,
abort what runs, and run requeued jobs first."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from polar_cli.generate.watches import Requeue
from polar_cli.node.health import DependencyLost, Gone, Outages, Watch, restart_with_backoff
from polar_cli.node.pools import Job, PoolLimits, RunEnd, StagePools, Timings


def scripted_check(answers: list[str | Gone | None]) -> Callable[[], Awaitable[str | Gone | None]]:
    """Answers in order, then healthy."""

    async def check() -> str | Gone | None:
        return answers.pop(0) if answers else None

    return check


async def run_until(watch: Watch, done: Callable[[], bool], limit: float = 5.0) -> None:
    task = asyncio.create_task(watch.run())
    try:
        async with asyncio.timeout(limit):
            while not done():
                await asyncio.sleep(0.005)
                if task.done():
                    task.result()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_two_failures_below_the_threshold_change_nothing() -> None:
    outages = Outages()
    checks = ["refused", "refused", None, "refused", None]
    watch = Watch("engine", scripted_check(checks), outages, interval=0.001, failures=3)
    asyncio.run(run_until(watch, lambda: not checks))
    assert outages.epoch == 0 and outages.open()


def test_an_outage_closes_the_gate_ends_sessions_and_reopens_when_it_answers() -> None:
    outages = Outages()
    seen: list[tuple[str, bool]] = []
    opened: list[int] = []
    outages.on_open = lambda: opened.append(outages.epoch)

    async def on_down(reason: str) -> None:
        seen.append((reason, outages.open()))

    # three failures: down; then the recovery wait sees two more failures before it answers
    checks: list[str | Gone | None] = ["refused"] * 5
    watch = Watch("engine", scripted_check(checks), outages, interval=0.001, failures=3, on_down=on_down)
    asyncio.run(run_until(watch, lambda: bool(opened)))
    assert seen == [("refused", False)]  # the gate was closed when the sessions were ended
    assert outages.epoch == 1 and outages.open() and opened == [1]
    (entry,) = outages.history
    assert entry["dependency"] == "engine" and entry["up_at"] is not None
    assert str(entry["recovered_by"]).startswith("answering again")


def test_gone_needs_no_confirmation_and_recovery_restarts() -> None:
    outages = Outages()
    restarted: list[bool] = []

    async def recover() -> str:
        restarted.append(outages.open())
        return "restarted"

    watch = Watch("engine", scripted_check([Gone("exited with -9")]), outages, interval=0.001, failures=3,
                  recover=recover)  # fmt: skip
    asyncio.run(run_until(watch, lambda: outages.epoch == 1 and outages.open()))
    assert restarted == [False]
    assert outages.history[0]["reason"] == "exited with -9" and outages.history[0]["recovered_by"] == "restarted"


def test_a_dependency_that_never_comes_back_raises_one_line() -> None:
    outages = Outages()
    watch = Watch("the Docker engine", scripted_check(["refused"] * 10_000), outages, interval=0.001, failures=1,
                  give_up_after=0.05)  # fmt: skip
    with pytest.raises(DependencyLost) as caught:
        asyncio.run(run_until(watch, lambda: False))
    assert "the Docker engine stopped answering (refused)" in str(caught.value)
    assert "\n" not in str(caught.value) and not outages.open()


def test_restarts_back_off_and_give_up_naming_the_last_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    waits: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        waits.append(seconds)

    calls = iter([RuntimeError("port in use"), RuntimeError("CUDA OOM\nlong log"), None])

    async def restart() -> None:
        error = next(calls)
        if error is not None:
            raise error

    monkeypatch.setattr(asyncio, "sleep", fake_sleep)
    assert asyncio.run(restart_with_backoff("server", restart, attempts=3, backoff=10)) == "restarted (try 3/3)"
    assert waits == [10, 20, 40]
    calls = iter([RuntimeError("port in use"), RuntimeError("CUDA OOM\nlong log")])
    with pytest.raises(DependencyLost, match=r"2 restart\(s\) failed; the last: CUDA OOM$"):
        asyncio.run(restart_with_backoff("server", restart, attempts=2, backoff=1))
    with pytest.raises(DependencyLost, match="restarts are off"):
        asyncio.run(restart_with_backoff("server", restart, attempts=0, backoff=1))


class Stages:
    """RUN blocks until released; every stage is recorded."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.inits: list[str] = []
        self.ends: dict[str, list[RunEnd]] = {}

    async def init(self, job: Job[int], deadline: float) -> str:
        self.inits.append(job.key)
        return job.key

    async def run(self, job: Job[int], session: str, deadline: float) -> str:
        await self.release.wait()
        return "ran"

    async def postrun(self, job: Job[int], session: str | None, end: RunEnd, timings: Timings) -> RunEnd:
        self.ends.setdefault(job.key, []).append(end)
        return end

    async def discard(self, job: Job[int], session: str) -> None:
        pass


def test_the_gate_stops_dispatch_abort_ends_runs_as_errors_and_requeued_jobs_go_first() -> None:
    async def scenario() -> tuple[Stages, list[str]]:
        stages = Stages()
        open_ = [True]
        results: list[str] = []
        pools: StagePools[int, str, Any] = StagePools(
            stages, PoolLimits(init=1, run=2, postrun=2, ready=0), lambda job, r, t: results.append(job.key),
            gate=lambda: open_[0],
        )  # fmt: skip
        jobs = [Job(f"s{i}", i, 60.0) for i in range(4)]
        main = asyncio.create_task(pools.run(jobs))
        while len(stages.inits) < 2:
            await asyncio.sleep(0.001)
        open_[0] = False  # an outage: s0 and s1 are running
        assert pools.abort("the engine went down") == 2
        while len(results) < 2:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0.02)
        assert stages.inits == ["s0", "s1"], "nothing may start while the gate is closed"
        pools.requeue(jobs[0])
        await asyncio.sleep(0.02)
        assert stages.inits == ["s0", "s1"]
        open_[0] = True
        pools.kick()
        stages.release.set()
        await asyncio.wait_for(main, 5)
        return stages, results

    stages, results = asyncio.run(scenario())
    assert stages.inits[:3] == ["s0", "s1", "s0"], "the requeued job runs before the ones never started"
    assert [e.reason for e in stages.ends["s0"]] == ["run_error", "ok"]
    assert stages.ends["s0"][0].error == "the engine went down"
    assert sorted(results) == ["s0", "s0", "s1", "s2", "s3"]


def test_requeue_reruns_only_errors_of_sessions_an_outage_hit_and_only_so_often() -> None:
    outages = Outages()
    requeue = Requeue(outages, retries=2)
    job = Job("before", 0, 60.0)
    requeue.started_session("before")
    outages.went_down("engine", "refused")
    assert requeue.finished(job, "error")
    assert not requeue.finished(job, "rejected"), "a verdict is never rerun"
    outages.came_back("engine", "restarted")
    requeue.started_session("before")
    outages.went_down("engine", "refused")
    assert requeue.finished(job, "error")
    requeue.started_session("before")
    outages.went_down("engine", "refused")
    assert not requeue.finished(job, "error"), "outage_retries bounds it"


def test_errors_just_before_an_outage_is_declared_run_again_and_older_ones_do_not() -> None:
    """Docker's death fails the sessions in flight at once; the watch declares the outage a check or two later."""
    now = [100.0]
    outages = Outages()
    requeue = Requeue(outages, retries=1, clock=lambda: now[0])
    rerun: list[str] = []
    requeue.rerun = lambda job: rerun.append(job.key)
    for key in ("old", "cut"):
        requeue.started_session(key)
    assert not requeue.finished(Job("old", 0, 60.0), "error"), "no outage yet: the next run's to retry"
    now[0] = 110.0
    assert not requeue.finished(Job("cut", 1, 60.0), "error")
    # the failing began at 109 (a check interval before the first failed check); declared at 111
    now[0] = 111.0
    outages.went_down("the Docker engine", "refused", since=109.0)
    assert rerun == ["cut"]
    outages.went_down("the Docker engine", "refused", since=100.0)
    assert rerun == ["cut", "old"], "a later outage whose failing began earlier covers it"


def test_stop_ends_a_watch_even_when_its_cancellation_is_lost() -> None:
    """Before Python 3.12, ``asyncio.wait_for`` can swallow a cancellation that lands as its inner call finishes;
    `run_watched` therefore stops its watches as well as cancelling them."""

    async def scenario() -> None:
        outages = Outages()
        watch = Watch("engine", scripted_check([]), outages, interval=0.001)
        task = asyncio.create_task(watch.run())
        await asyncio.sleep(0.01)
        watch.stop()
        await asyncio.wait_for(task, 1)

    asyncio.run(scenario())
