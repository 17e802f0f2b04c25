"""Load: 256 harness sessions streaming through one gateway at once, against a slow upstream (seconds per call).

The upstream is the SGLang double holding every answer for `DELAY` seconds; the sessions (tests/support/load.py) mix
the four provider APIs, all streaming, each making `CALLS` calls in a row. What would fail:
- anything serialising sessions (a lock, a pool of a few upstream connections): the double would not see the calls
  at once (`peak_in_flight`), and the run would take far longer than ``CALLS * DELAY``;
- a timeout that misfires: the server's request timer (`REQUEST_TIMEOUT`, shorter than `DELAY`) firing while a call
  waits on the model, or an upstream timer that runs per connection or per session instead of per exchange
  (`UPSTREAM_TIMEOUT` is above one call's delay but below a session's `CALLS * DELAY`);
- lost or doubled captures: every call must be on disk exactly once, ``ok``, with the prompt ids the double computed;
- unbounded buffering: the process's resident memory is sampled during the run (`RSS_GROWTH_MB`).
The second case has sessions whose patience is shorter than the upstream: they hang up mid-call, and the gateway
must capture that call as a client error, abort it upstream, and go on serving them and everyone else.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from polar_cli.capture import read_capture_dir
from polar_cli.gateway.server import ServerLimits
from tests.support.gateway import RunningGateway, running_gateway
from tests.support.load import (
    SSL_CONTEXT,
    CallResult,
    RssSampler,
    api_for,
    call_request,
    raise_fd_limit,
    run_sessions,
    stream_complete,
)
from tests.support.sglang_double import SGLangDouble

pytestmark = pytest.mark.integration

SESSIONS = 256
CALLS = 4
DELAY = 3.0
UPSTREAM_TIMEOUT = 10.0  # > DELAY (one call), < CALLS * DELAY (a session's calls on one kept-alive connection)
# < DELAY: must not run while a call waits on the model. Not much shorter: it does time the client, and a client loop
# driving 256 sessions on a busy machine can stall a second between a request's head and its body (a rightful 408)
REQUEST_TIMEOUT = 2.0
CLIENT_TIMEOUT = 30.0
RSS_GROWTH_MB = 300
LIMITS = ServerLimits(request_timeout=REQUEST_TIMEOUT, idle_timeout=60.0)


@pytest.fixture(autouse=True)
def _enough_files() -> None:
    # four sockets per session in one process: client, gateway's accepted side, gateway -> double, double's side
    if not raise_fd_limit(8 * SESSIONS + 256):
        pytest.skip("the open-files limit is too low for the load test")


def open_sessions(gw: RunningGateway, names: list[str]) -> list[tuple[str, str]]:
    return [(name, gw.open_session(name)) for name in names]


def check_captured(gw: RunningGateway, upstream: SGLangDouble, results: list[CallResult]) -> None:
    """Every answered call is on disk exactly once, ``ok``, with the ids the double rendered and sampled."""
    gw.flush()
    captured = read_capture_dir(gw.capture_dir)
    by_rid = {r.body["rid"]: r for r in upstream.chat_requests}
    for (session, seq), result in {(r.session, r.seq): r for r in results}.items():
        records = [rec for rec in captured[session] if rec.seq == seq]
        assert len(records) == 1, f"{session} call {seq}: {len(records)} records"
        record = records[0]
        assert record.status == "ok", (session, seq, record.status, record.error)
        assert record.api == result.api
        assert record.normalized is not None
        sent = by_rid[record.normalized["rid"]]
        assert record.prompt_ids == list(sent.prompt_ids or ()) and record.prompt_ids
        assert len(record.response_ids) == len(record.response_logprobs) > 0


def test_256_streaming_sessions_against_a_slow_upstream(tmp_path: Path) -> None:
    names = [f"load-{i:03d}" for i in range(SESSIONS)]
    with (
        SGLangDouble(delay=DELAY, template=None) as upstream,
        running_gateway(
            upstream.url, tmp_path / "capture", limits=LIMITS, upstream_timeout=UPSTREAM_TIMEOUT, model="m"
        ) as gw,
    ):
        sessions = open_sessions(gw, names)
        with RssSampler() as rss:
            started = time.perf_counter()
            results = asyncio.run(run_sessions(gw.url, sessions, calls=CALLS, timeout=CLIENT_TIMEOUT))
            wall = time.perf_counter() - started
        failed = [r for r in results if r.status != 200 or not r.complete or r.error]
        assert not failed, f"{len(failed)} calls failed, e.g. {failed[:3]}"
        check_captured(gw, upstream, results)
        peak = upstream.peak_in_flight
        chat_calls = len(upstream.chat_requests)

    assert len(results) == SESSIONS * CALLS
    assert all("ok" in r.text for r in results)
    assert chat_calls == SESSIONS * CALLS  # nothing retried, nothing lost on the way
    # every session's first call was at the double at the same time: nothing in front of it serialised them
    assert peak >= 0.9 * SESSIONS, f"peak upstream concurrency {peak}"
    assert min(r.latency for r in results) >= DELAY
    # serialised, even in fours, this would take over 100 s; concurrent it is CALLS * DELAY plus the CPU work
    assert wall < CALLS * DELAY + 30, f"{wall:.1f} s"
    assert rss.growth < RSS_GROWTH_MB, f"RSS grew {rss.growth:.0f} MB (from {rss.baseline:.0f} MB)"
    print(
        f"\n{SESSIONS} sessions x {CALLS} calls, upstream delay {DELAY} s: wall {wall:.1f} s, "
        f"{len(results) / wall:.1f} calls/s, peak upstream concurrency {peak}, "
        f"max latency {max(r.latency for r in results):.2f} s, "
        f"RSS {rss.baseline:.0f} -> peak {rss.peak:.0f} MB (+{rss.growth:.0f}), end {rss.end:.0f} MB"
    )


async def impatient_session(base_url: str, session: str, key: str, api: str, patience: float) -> list[CallResult]:
    """A first call given up after ``patience`` seconds (the client hangs up), then a second one awaited in full."""
    path, headers, body = call_request(api, key, session, 0)
    results: list[CallResult] = []
    async with httpx.AsyncClient(base_url=base_url, verify=SSL_CONTEXT, timeout=patience) as client:
        started = time.perf_counter()
        try:
            response = await client.post(path, content=body, headers=headers)
            results.append(CallResult(session, api, 0, response.status_code, time.perf_counter() - started, False))
        except httpx.ReadTimeout:
            results.append(CallResult(session, api, 0, 0, time.perf_counter() - started, False, "ReadTimeout"))
    async with httpx.AsyncClient(base_url=base_url, verify=SSL_CONTEXT, timeout=CLIENT_TIMEOUT) as client:
        path, headers, body = call_request(api, key, session, 1)
        started = time.perf_counter()
        response = await client.post(path, content=body, headers=headers)
        latency = time.perf_counter() - started
        complete = response.status_code == 200 and stream_complete(api, response.text)
        results.append(CallResult(session, api, 1, response.status_code, latency, complete, text=response.text))
    return results


def test_sessions_that_hang_up_on_a_slow_upstream_leave_the_others_unaffected(tmp_path: Path) -> None:
    patient, impatient = 64, 8
    delay, patience = 2.0, 0.5
    with (
        SGLangDouble(delay=delay, template=None) as upstream,
        running_gateway(upstream.url, tmp_path / "capture", limits=LIMITS, upstream_timeout=UPSTREAM_TIMEOUT) as gw,
    ):
        calm = open_sessions(gw, [f"calm-{i:02d}" for i in range(patient)])
        rushed = open_sessions(gw, [f"rushed-{i}" for i in range(impatient)])

        async def run_all() -> tuple[list[CallResult], list[CallResult]]:
            calm_run = run_sessions(gw.url, calm, calls=2, timeout=CLIENT_TIMEOUT)
            rushed_runs = [
                impatient_session(gw.url, name, key, api_for(i), patience) for i, (name, key) in enumerate(rushed)
            ]
            done = await asyncio.gather(calm_run, *rushed_runs)
            return done[0], [r for rs in done[1:] for r in rs]

        calm_results, rushed_results = asyncio.run(run_all())
        health = httpx.get(gw.url + "/health", timeout=5)
        deadline = time.time() + 10  # the aborts go out on the gateway's loop, after the hang-ups
        while len([r for r in upstream.requests if r.path == "/abort_request"]) < impatient and time.time() < deadline:
            time.sleep(0.05)
        aborted = {r.body["rid"] for r in upstream.requests if r.path == "/abort_request"}
        check_captured(gw, upstream, calm_results + [r for r in rushed_results if r.seq == 1])
        captured = read_capture_dir(gw.capture_dir)

    assert health.status_code == 200
    assert all(r.status == 200 and r.complete for r in calm_results), [r for r in calm_results if not r.complete]
    assert len(calm_results) == patient * 2
    hung_up = [r for r in rushed_results if r.seq == 0]
    assert all(r.error == "ReadTimeout" for r in hung_up), hung_up
    assert all(r.status == 200 and r.complete for r in rushed_results if r.seq == 1)
    for name, _ in rushed:
        first = [rec for rec in captured[name] if rec.seq == 0]
        assert len(first) == 1
        assert first[0].status == "client_error" and "disconnected" in (first[0].error or "")
        assert first[0].prompt_ids == [] and first[0].normalized is not None
        assert first[0].normalized["rid"] in aborted  # the server's slot was freed
    assert len(aborted) == impatient
