"""Stage pools with simulated sessions (sleeps): the READY buffer is honoured, RUN slots never idle while READY holds a
session, timeouts start at INIT, and cancellation leaves no session behind."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from polar_cli.node.pools import Job, PoolLimits, RunEnd, Snapshot, StagePools, Timings

INIT, RUN, POST = 0.02, 0.05, 0.01


@dataclass
class Sim:
    """Sleep-based stages that record what happened to every session."""

    init_s: float = INIT
    run_s: float = RUN
    post_s: float = POST
    honour_deadline: bool = True
    fail_init: set[str] = field(default_factory=set)
    created: list[str] = field(default_factory=list)
    postrun_seen: dict[str, tuple[Any, RunEnd]] = field(default_factory=dict)
    discarded: list[str] = field(default_factory=list)

    async def init(self, job: Job[int], deadline: float) -> str:
        await asyncio.sleep(self.init_s)
        if job.key in self.fail_init:
            raise RuntimeError(f"cannot start {job.key}")
        self.created.append(job.key)
        return f"rt-{job.key}"

    async def run(self, job: Job[int], session: str, deadline: float) -> str:
        loop = asyncio.get_running_loop()
        if self.honour_deadline and loop.time() + self.run_s > deadline:
            await asyncio.sleep(max(deadline - loop.time(), 0))
            return "timed_out"
        await asyncio.sleep(self.run_s)
        return "done"

    async def postrun(self, job: Job[int], session: str | None, end: RunEnd, timings: Timings) -> str:
        await asyncio.sleep(self.post_s)
        self.postrun_seen[job.key] = (session, end)
        return end.reason

    async def discard(self, job: Job[int], session: str) -> None:
        self.discarded.append(job.key)


def jobs(n: int, timeout: float = 60.0) -> list[Job[int]]:
    return [Job(f"s{i}", i, timeout) for i in range(n)]


async def drive(
    sim: Sim, limits: PoolLimits, n: int, timeout: float = 60.0, *, observe_loop: bool = True
) -> tuple[list[Snapshot], list[Snapshot], dict[str, tuple[str, Timings]]]:
    """Run n jobs; returns the pool's own snapshots, an independent observer's, and the results."""
    snapshots: list[Snapshot] = []
    observed: list[Snapshot] = []
    results: dict[str, tuple[str, Timings]] = {}
    pools: StagePools[int, str, str] = StagePools(
        sim,
        limits,
        lambda job, result, timings: results.__setitem__(job.key, (result, timings)),
        on_change=snapshots.append,
        clock=lambda: asyncio.get_running_loop().time(),
    )

    async def observe() -> None:
        while True:  # sees the state between any two steps of the event loop
            observed.append(pools.snapshot())
            await asyncio.sleep(0)

    watcher = asyncio.create_task(observe() if observe_loop else asyncio.sleep(0))
    try:
        await pools.run(jobs(n, timeout))
    finally:
        watcher.cancel()
    return snapshots, observed, results


@pytest.mark.parametrize(("init", "run", "ready"), [(4, 3, 2), (2, 4, 1), (6, 2, 3), (3, 3, 0)])
def test_ready_buffer_is_honoured_and_run_slots_never_idle(init: int, run: int, ready: int) -> None:
    limits = PoolLimits(init=init, run=run, postrun=2, ready=ready)
    snapshots, observed, results = asyncio.run(drive(Sim(), limits, 24))

    assert sorted(results) == sorted(f"s{i}" for i in range(24))
    assert all(result == "ok" for result, _ in results.values())
    assert len(observed) > 100  # the observer really interleaved with the pool
    for snap in snapshots + observed:
        assert snap.ready <= ready, snap
        # Rule 1: a session in READY means every RUN slot is busy
        assert snap.ready == 0 or snap.running == run, snap
        # Rule 2: INIT runs ahead only as far as the buffer allows
        assert snap.init + snap.ready + snap.running <= run + ready, snap
        assert snap.init <= init and snap.running <= run and snap.postrun <= 24
    # the buffer was actually used (not trivially empty)
    if ready:
        assert max(s.ready for s in snapshots) == ready


def test_per_stage_timings_and_ready_wait() -> None:
    # one RUN slot, two sessions: the second waits in READY while the first runs
    limits = PoolLimits(init=2, run=1, postrun=1, ready=1)
    sim = Sim(init_s=0.1, run_s=0.4, post_s=0.05)
    _snaps, _obs, results = asyncio.run(drive(sim, limits, 2, observe_loop=False))
    first, second = results["s0"][1], results["s1"][1]
    assert first.init == pytest.approx(0.1, abs=0.05)
    assert first.run == pytest.approx(0.4, abs=0.12)
    assert first.postrun == pytest.approx(0.05, abs=0.05)
    assert first.ready_wait < 0.03
    # s1 finished INIT with s0 and waited in READY for s0's whole run
    assert second.ready_wait == pytest.approx(0.4, abs=0.12)


def test_buffer_keeps_run_slots_busier_than_no_buffer() -> None:
    def occupancy(ready: int, init: int) -> float:
        async def go() -> float:
            sim = Sim(init_s=0.04, run_s=0.1, post_s=0.01)
            pools: StagePools[int, str, str] = StagePools(sim, PoolLimits(init, 4, 2, ready), lambda *a: None)
            loop = asyncio.get_running_loop()
            start = loop.time()
            await pools.run(jobs(40))
            return pools.occupancy(loop.time() - start)

        return asyncio.run(go())

    without, with_buffer = occupancy(0, 4), occupancy(4, 4)
    # without a buffer a RUN slot waits for every INIT: about run / (init + run)
    assert without == pytest.approx(0.1 / 0.14, abs=0.08)
    assert with_buffer > 0.85 > without + 0.1


def test_session_timeout_counts_from_init_and_keeps_partial_work() -> None:
    # the run stage honours the deadline, which counts INIT: 0.3 s of INIT leaves 0.3 s of a 0.6 s timeout to run
    # (were it counted from RUN, INIT + RUN would take 0.9 s)
    sim = Sim(init_s=0.3, run_s=5.0)
    limits = PoolLimits(init=1, run=1, postrun=1, ready=0)
    _s, _o, results = asyncio.run(drive(sim, limits, 1, timeout=0.6, observe_loop=False))
    session, end = sim.postrun_seen["s0"]
    assert session == "rt-s0" and end.reason == "ok" and end.value == "timed_out"
    timings = results["s0"][1]
    assert timings.init + timings.run == pytest.approx(0.6, abs=0.12)


def test_pool_backstop_ends_an_overrunning_run_and_postrun_still_runs() -> None:
    async def go() -> tuple[Sim, dict[str, Any]]:
        sim = Sim(init_s=0.01, run_s=10.0, honour_deadline=False)
        results: dict[str, Any] = {}
        pools: StagePools[int, str, str] = StagePools(
            sim, PoolLimits(1, 1, 1, 0), lambda j, r, t: results.__setitem__(j.key, r), run_grace=0.05
        )
        await asyncio.wait_for(pools.run(jobs(1, timeout=0.1)), 5)
        return sim, results

    sim, results = asyncio.run(go())
    session, end = sim.postrun_seen["s0"]
    assert session == "rt-s0" and end.reason == "timeout" and "overran" in (end.error or "")
    assert results == {"s0": "timeout"}


def test_timeout_while_waiting_in_ready_skips_run() -> None:
    # one RUN slot held 0.3 s by s0; s1's 0.15 s session timeout passes in READY
    sim = Sim(init_s=0.01, run_s=0.3)
    limits = PoolLimits(init=2, run=1, postrun=2, ready=1)

    async def go() -> None:
        pools: StagePools[int, str, str] = StagePools(sim, limits, lambda *a: None)
        await pools.run([Job("s0", 0, 5.0), Job("s1", 1, 0.15)])

    asyncio.run(go())
    session, end = sim.postrun_seen["s1"]
    assert session == "rt-s1" and end.reason == "timeout" and "READY" in (end.error or "")
    assert sim.postrun_seen["s0"][1].reason == "ok"


def test_init_failure_and_init_timeout_reach_postrun_without_a_session() -> None:
    sim = Sim(init_s=0.05, fail_init={"s1"})
    _s, _o, results = asyncio.run(drive(sim, PoolLimits(2, 2, 2, 1), 3))
    assert sim.postrun_seen["s1"][0] is None and sim.postrun_seen["s1"][1].reason == "init_error"
    assert "cannot start s1" in (sim.postrun_seen["s1"][1].error or "")
    assert results["s0"][0] == "ok" and results["s2"][0] == "ok"

    slow = Sim(init_s=1.0)
    _s, _o, results = asyncio.run(drive(slow, PoolLimits(1, 1, 1, 0), 1, timeout=0.05))
    assert slow.postrun_seen["s0"] == (None, RunEnd("timeout", error=slow.postrun_seen["s0"][1].error))
    assert results["s0"][0] == "timeout"


def test_cancel_discards_every_session_that_did_not_reach_postrun() -> None:
    async def go() -> tuple[Sim, StagePools[int, str, str]]:
        sim = Sim(init_s=0.02, run_s=1.0, post_s=1.0)
        pools: StagePools[int, str, str] = StagePools(sim, PoolLimits(3, 2, 1, 2), lambda *a: None)
        task = asyncio.create_task(pools.run(jobs(20)))
        await asyncio.sleep(0.2)  # sessions are in RUN and READY now
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return sim, pools

    sim, pools = asyncio.run(go())
    assert sim.created, "nothing was initialised"
    # every session created was either handed to a finished POSTRUN or discarded, never leaked
    finished = set(sim.postrun_seen)
    assert set(sim.created) == finished | set(sim.discarded)
    assert len(sim.discarded) >= 2 + 2  # the two running and the two READY at least
    assert not pools._tasks


def test_a_backed_up_postrun_stops_new_inits() -> None:
    # grading is four times slower than running, with one worker: sessions must not pile up waiting for it
    limits = PoolLimits(init=2, run=2, postrun=1, ready=1)
    snapshots, _obs, results = asyncio.run(drive(Sim(init_s=0.01, run_s=0.02, post_s=0.08), limits, 16))
    assert len(results) == 16
    in_flight_when_stopped = limits.init + limits.ready + limits.run
    # waiting (not yet in a worker) sessions: more than postrun + 1 only by what was already in flight
    assert max(s.postrun - min(s.postrun, limits.postrun) for s in snapshots) <= limits.postrun + in_flight_when_stopped
    assert max(s.postrun for s in snapshots) < 16 // 2


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError):
        PoolLimits(init=0, run=1, postrun=1, ready=0)
    with pytest.raises(ValueError):
        PoolLimits(init=1, run=1, postrun=1, ready=-1)
