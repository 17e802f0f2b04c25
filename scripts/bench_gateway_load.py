"""Benchmark the gateway under load: N concurrent streaming sessions x K calls against a slow upstream (issue 13).

The upstream is the SGLang double (tests/support/sglang_double.py, ChatML ids, in its own process), holding every
answer for ``--delay`` seconds like a long generation; it is not a real SGLang. The gateway is `polar proxy` (capture
on, its own process, a fresh one per run); this process is the load generator (tests/support/load.py): each session
its own httpx client, the four provider APIs round-robin, all streaming, K sequential calls with a growing history.

Runs, in this order and in the same process: N=1 (the baseline), N sessions through the gateway, and N sessions
straight at the double (OpenAI Chat, no gateway: how much of the added latency is the double and the load generator
sharing the machine). Prints for each: calls/s, p50/p99 latency added over the upstream delay, peak concurrency the
double saw, the gateway's peak RSS (VmHWM); then the ratios N/baseline: throughput scaling (ideal: N) and added
latency.

    python scripts/bench_gateway_load.py [--sessions 256] [--calls 3] [--delay 2.0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
import orjson

from polar_cli.capture import read_capture_dir
from tests.support.load import SSL_CONTEXT, CallResult, percentile, raise_fd_limit, run_sessions

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


# -- the double, in its own process, driven by lines on stdin ----------------------------------------------------------


def serve_double() -> None:
    """``delay SECONDS`` sets the delay; ``stats`` prints {peak, calls} and resets the peak; EOF stops."""
    from tests.support.sglang_double import SGLangDouble

    with SGLangDouble(template=None, strict=False) as double:
        print(double.url, flush=True)
        for line in sys.stdin:
            command, _, arg = line.strip().partition(" ")
            if command == "delay":
                double.delay = float(arg)
                print("ok", flush=True)
            elif command == "stats":
                shared = double._shared
                with shared.lock:
                    stats = {"peak": shared.peak_in_flight, "calls": shared.calls}
                    shared.peak_in_flight = shared.in_flight
                print(json.dumps(stats), flush=True)


class Double:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--double"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
        )
        self.url = self._read()

    def _read(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().strip()

    def _ask(self, line: str) -> str:
        stdin: IO[str] | None = self.proc.stdin
        assert stdin is not None
        stdin.write(line + "\n")
        stdin.flush()
        return self._read()

    def set_delay(self, seconds: float) -> None:
        self._ask(f"delay {seconds}")

    def stats(self) -> dict[str, int]:
        stats: dict[str, int] = json.loads(self._ask("stats"))
        return stats

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(10)


# -- one run ---------------------------------------------------------------------------------------------------------


def start_gateway(upstream: str, capture: Path, port: int, timeout: float) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "polar_cli", "proxy", "--upstream", upstream, "--port", str(port)]
    argv += ["--capture-dir", str(capture), "--allow-unknown-keys", "--log-level", "warning"]
    argv += ["--upstream-timeout", str(timeout)]
    proc = subprocess.Popen(argv, cwd=ROOT)
    wait_port(port)
    return proc


def summary(results: list[CallResult], wall: float, delay: float) -> dict[str, Any]:
    ok = [r for r in results if r.status == 200 and r.complete]
    added = [r.latency - delay for r in ok]
    return {
        "calls": len(results),
        "failed": len(results) - len(ok),
        "wall_s": round(wall, 2),
        "calls_per_s": round(len(results) / wall, 2),
        "added_p50_ms": round(percentile(added, 0.5) * 1000, 1) if added else None,
        "added_p99_ms": round(percentile(added, 0.99) * 1000, 1) if added else None,
        "added_mean_ms": round(statistics.fmean(added) * 1000, 1) if added else None,
    }


def gateway_run(double: Double, sessions: int, calls: int, delay: float, timeout: float) -> dict[str, Any]:
    capture = Path(tempfile.mkdtemp(prefix="polar-bench-load-"))
    port = free_port()
    double.set_delay(0.0)  # the gateway's start-up probes are not the load
    gateway = start_gateway(double.url, capture, port, timeout)
    try:
        rss_idle = proc_status_mb(gateway.pid, "VmRSS")
        double.set_delay(delay)
        double.stats()
        keys = [(f"s{i}", f"sk-bench-load-{sessions}-{i}") for i in range(sessions)]
        cpu = cpu_seconds(gateway.pid)
        started = time.perf_counter()
        results = asyncio.run(run_sessions(f"http://127.0.0.1:{port}", keys, calls=calls, timeout=timeout + 30))
        wall = time.perf_counter() - started
        out = summary(results, wall, delay)
        out["gateway_cpu_ms_per_call"] = round((cpu_seconds(gateway.pid) - cpu) / len(results) * 1000, 2)
        out["upstream_peak_concurrency"] = double.stats()["peak"]
        out["gateway_rss_idle_mb"] = round(rss_idle, 1)
        out["gateway_rss_peak_mb"] = round(proc_status_mb(gateway.pid, "VmHWM"), 1)
        out["gateway_rss_after_mb"] = round(proc_status_mb(gateway.pid, "VmRSS"), 1)
    finally:
        gateway.send_signal(signal.SIGINT)  # the gateway flushes every capture record before it exits
        gateway.wait(30)
    records = [r for rs in read_capture_dir(capture).values() for r in rs]
    out["captured_ok"] = sum(r.status == "ok" for r in records)
    out["captured_other"] = len(records) - out["captured_ok"]
    shutil.rmtree(capture, ignore_errors=True)
    return out


async def direct_sessions(url: str, sessions: int, calls: int, timeout: float) -> list[CallResult]:
    async def one(i: int) -> list[CallResult]:
        results = []
        headers = {"content-type": "application/json"}
        async with httpx.AsyncClient(base_url=url, verify=SSL_CONTEXT, timeout=timeout, headers=headers) as client:
            for seq in range(calls):
                body = {"model": "polar-test-model", "messages": [{"role": "user", "content": f"task {i} {seq}"}]}
                started = time.perf_counter()
                response = await client.post("/v1/chat/completions", content=orjson.dumps(body))
                latency = time.perf_counter() - started
                complete = response.status_code == 200 and b'"finish_reason"' in response.content
                results.append(CallResult(f"d{i}", "direct", seq, response.status_code, latency, complete))
        return results

    return [r for rs in await asyncio.gather(*(one(i) for i in range(sessions))) for r in rs]


def direct_run(double: Double, sessions: int, calls: int, delay: float, timeout: float) -> dict[str, Any]:
    double.set_delay(delay)
    double.stats()
    started = time.perf_counter()
    results = asyncio.run(direct_sessions(double.url, sessions, calls, timeout))
    out = summary(results, time.perf_counter() - started, delay)
    out["upstream_peak_concurrency"] = double.stats()["peak"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=256)
    ap.add_argument("--calls", type=int, default=3, help="sequential calls per session")
    ap.add_argument("--baseline-calls", type=int, default=10, help="calls of the one baseline session")
    ap.add_argument("--delay", type=float, default=2.0, help="seconds the double holds every answer")
    ap.add_argument("--upstream-timeout", type=float, default=60.0)
    ap.add_argument("--no-direct", action="store_true", help="skip the run straight at the double")
    ap.add_argument("--double", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.double:
        serve_double()
        return
    if not raise_fd_limit(4 * args.sessions + 256):
        sys.exit(f"the open-files limit is too low for {args.sessions} sessions")
    double = Double()
    try:
        runs = {"baseline_1": gateway_run(double, 1, args.baseline_calls, args.delay, args.upstream_timeout)}
        runs[f"gateway_{args.sessions}"] = gateway_run(
            double, args.sessions, args.calls, args.delay, args.upstream_timeout
        )
        if not args.no_direct:
            runs[f"direct_{args.sessions}"] = direct_run(
                double, args.sessions, args.calls, args.delay, args.upstream_timeout
            )
    finally:
        double.stop()
    print(
        f"upstream: the SGLang double, {args.delay:g} s per call; {args.calls} calls per session "
        f"({args.baseline_calls} for the baseline)"
    )
    print(json.dumps(runs, indent=2))
    base, load = runs["baseline_1"], runs[f"gateway_{args.sessions}"]
    print(
        f"throughput scaling {args.sessions}/1: {load['calls_per_s'] / base['calls_per_s']:.1f}x "
        f"(ideal {args.sessions}x)"
    )
    if base["added_p50_ms"] and load["added_p50_ms"] is not None:
        print(
            f"added latency {args.sessions}/1: p50 {load['added_p50_ms']:.1f} / {base['added_p50_ms']:.1f} ms "
            f"= {load['added_p50_ms'] / base['added_p50_ms']:.1f}x, "
            f"p99 {load['added_p99_ms']:.1f} / {base['added_p99_ms']:.1f} ms"
        )
    print(
        f"gateway peak RSS: {base['gateway_rss_peak_mb']:.0f} MB at 1 session, "
        f"{load['gateway_rss_peak_mb']:.0f} MB at {args.sessions}; CPU per call: "
        f"{base['gateway_cpu_ms_per_call']:.2f} ms at 1 session, "
        f"{load['gateway_cpu_ms_per_call']:.2f} ms at {args.sessions}"
    )
    if f"direct_{args.sessions}" in runs:
        direct = runs[f"direct_{args.sessions}"]
        print(
            f"straight at the double, {args.sessions} sessions: added p50 {direct['added_p50_ms']:.1f} ms, "
            f"p99 {direct['added_p99_ms']:.1f} ms (the double and load generator's share)"
        )
    bad = [name for name, run in runs.items() if run["failed"] or run.get("captured_other")]
    if bad:
        sys.exit(f"calls failed or were captured with an error in: {', '.join(bad)}")


if __name__ == "__main__":
    main()
