"""Rule 5 of the stage pools (issue 23 #2): no session is lost after RUN. A POSTRUN that raises or runs past its
limit, or a result callback that raises, gives the session the error result ``failed`` makes; a fatal exception
still stops the run."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from polar_cli.node.pools import Job, PoolLimits, RunEnd, StagePools, Timings
from tests.unit.node.test_node_pools import Sim, jobs


class Faulty(Sim):
    def __init__(self, raise_in: set[str], hang_in: set[str] = frozenset()) -> None:  # type: ignore[assignment]
        super().__init__()
        self.raise_in, self.hang_in = raise_in, hang_in

    async def postrun(self, job: Job[int], session: str | None, end: RunEnd, timings: Timings) -> str:
        if job.key in self.hang_in:
            await asyncio.sleep(3600)
        if job.key in self.raise_in:
            raise KeyError(job.key)
        return await super().postrun(job, session, end, timings)


def failed(job: Job[int], session: Any, end: RunEnd, timings: Timings, why: str) -> str:
    return f"error: {why} (session {session}, {end.reason})"


def drive(sim: Sim, n: int, on_result: Any, **kwargs: Any) -> StagePools[int, str, str]:
    pools: StagePools[int, str, str] = StagePools(sim, PoolLimits(2, 2, 2, 1), on_result, **kwargs)
    asyncio.run(pools.run(jobs(n)))
    return pools


def test_every_session_gets_a_result_whatever_postrun_or_the_callback_raised() -> None:
    results: dict[str, str] = {}
    refused = {"s3"}

    def on_result(job: Job[int], result: str, timings: Timings) -> None:
        if job.key in refused and not result.startswith("error"):
            raise OSError(5, "Input/output error")
        results[job.key] = result

    pools = drive(Faulty({"s1"}, {"s4"}), 6, on_result, failed=failed, postrun_timeout=0.5)
    assert sorted(results) == [f"s{i}" for i in range(6)]
    assert results["s1"] == "error: POSTRUN raised KeyError: 's1' (session rt-s1, ok)"
    assert (
        results["s3"] == "error: the result callback raised OSError: [Errno 5] Input/output error (session rt-s3, ok)"
    )
    assert results["s4"] == "error: POSTRUN did not finish within 0.5 s (session rt-s4, ok)"
    assert results["s0"] == "ok" and (pools.finished, pools.failed) == (6, 0)


def test_without_a_failed_result_a_failure_is_logged_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    results: list[str] = []
    pools = drive(Faulty({"s1"}), 3, lambda j, r, t: results.append(r))
    assert len(results) == 2 and (pools.finished, pools.failed) == (2, 1)
    assert "session s1: POSTRUN failed" in caplog.text


def test_a_fatal_exception_stops_the_run_and_is_raised() -> None:
    class Full(Exception):
        pass

    def on_result(job: Job[int], result: str, timings: Timings) -> None:
        raise Full("disk full")

    with pytest.raises(Full):
        drive(Faulty(set()), 4, on_result, failed=failed, fatal=(Full,))
