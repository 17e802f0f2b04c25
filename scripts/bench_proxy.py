"""Benchmark the gateway proxy against a fast local upstream stub (issue 2).

Four processes: an SGLang-shaped stub (precomputed answer: 2,000 prompt ids, 64 sampled ids with logprobs), the
proxy under test (`polar proxy`, capture on), the floor (`bench_forwarder.py`: a bare asyncio forwarder that relays the
same requests to the same stub without parsing them), and this load generator. The request is a ~34 KB Anthropic
Messages body with 12 tools and a 20-turn tool-use history, streamed back as SSE like Claude Code asks.

Prints: requests/s at 16 concurrent connections through the proxy and through the forwarder, and their ratio (the
proxy's share of the floor, both measured in this run), with each one's own CPU time per request in that phase;
p50/p99 latency at concurrency 1 through the proxy, the forwarder and direct to the stub (added = proxy - direct);
and the proxy's RSS after 256 sessions. With --litellm it
runs the same load through a LiteLLM proxy (1 worker) when LiteLLM is installed, for a ratio measured on the same
machine in the same run. ``--profile FILE`` runs the proxy under cProfile and leaves its stats in FILE.

    python scripts/bench_proxy.py [--seconds 10] [--litellm] [--profile proxy.prof]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
PROMPT_IDS = 2000
SAMPLED_IDS = 64


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def anthropic_body(stream: bool = True) -> bytes:
    schema = {
        "type": "object",
        "properties": {
            f"arg{j}": {"type": "string", "description": "an argument of this tool, described at some length " * 2}
            for j in range(6)
        },
        "required": ["arg0"],
    }
    tools = [{"name": f"tool_{i}", "description": "Does a thing. " * 12, "input_schema": schema} for i in range(12)]
    messages: list[dict[str, object]] = [{"role": "user", "content": "Fix the failing test in the repository. " * 10}]
    for turn in range(20):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Looking at step {turn}."},
                    {"type": "tool_use", "id": f"toolu_{turn:04d}", "name": "tool_1", "input": {"arg0": "ls -la " * 8}},
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{turn:04d}", "content": "file.py\n" * 60}],
            }
        )
    body = {
        "model": "claude-opus-5-5",
        "max_tokens": 32000,
        "stream": stream,
        "system": [{"type": "text", "text": "You are a careful coding agent. " * 80}],
        "tools": tools,
        "messages": messages,
    }
    return orjson.dumps(body)


def stub_answer() -> bytes:
    answer = {
        "id": "stub",
        "object": "chat.completion",
        "created": 0,
        "model": "stub",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "word " * (SAMPLED_IDS - 1), "tool_calls": None},
                "logprobs": {
                    "content": [
                        {"token": "w", "logprob": -0.5, "bytes": None, "top_logprobs": []} for _ in range(SAMPLED_IDS)
                    ]
                },
                "finish_reason": "stop",
                "matched_stop": 151645,
                "prompt_token_ids": list(range(1000, 1000 + PROMPT_IDS)),
                "response_token_ids": [*range(500, 500 + SAMPLED_IDS - 1), 151645],
            }
        ],
        "usage": {
            "prompt_tokens": PROMPT_IDS,
            "completion_tokens": SAMPLED_IDS,
            "total_tokens": PROMPT_IDS + SAMPLED_IDS,
        },
    }
    return orjson.dumps(answer)


# -- the stub upstream ---------------------------------------------------------------------------------------------


async def run_stub(port: int) -> None:
    sys.path.insert(0, str(HERE.parent))
    from polar_cli.wire.http11 import NEED_DATA, Limits, RequestParser, encode_response

    reply = encode_response(200, stub_answer())
    # a streaming client of the stub (another proxy under comparison) gets the same answer as OpenAI chunks
    chunk = {"id": "stub", "object": "chat.completion.chunk", "created": 0, "model": "stub"}
    frames = [
        {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "word " * (SAMPLED_IDS - 1)}}]},
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {**chunk, "choices": [], "usage": {"prompt_tokens": PROMPT_IDS, "completion_tokens": SAMPLED_IDS,
                                          "total_tokens": PROMPT_IDS + SAMPLED_IDS}},
    ]  # fmt: skip
    sse = b"".join(b"data: " + orjson.dumps(f) + b"\n\n" for f in frames) + b"data: [DONE]\n\n"
    stream_reply = encode_response(200, sse, "text/event-stream")
    models = encode_response(200, b'{"object":"list","data":[{"id":"stub","object":"model"}]}')

    class Stub(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t = transport
            self.p = RequestParser(Limits())

        def data_received(self, data: bytes) -> None:
            self.p.receive_data(data)
            while (event := self.p.next_event()) is not NEED_DATA:
                if event.path.endswith("/models"):  # type: ignore[union-attr]
                    self.t.write(models)  # type: ignore[attr-defined]
                elif b'"stream":true' in event.body.replace(b" ", b""):  # type: ignore[union-attr]
                    self.t.write(stream_reply)  # type: ignore[attr-defined]
                else:
                    self.t.write(reply)  # type: ignore[attr-defined]

    server = await asyncio.get_running_loop().create_server(Stub, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


# -- the load generator --------------------------------------------------------------------------------------------


async def one_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    head = await reader.readuntil(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"bad answer: {head[:200]!r}")
    if b"chunked" in head.lower():
        while True:
            size = int((await reader.readuntil(b"\r\n"))[:-2].split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                return
    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
    await reader.readexactly(length)


def http_post(path: str, body: bytes, key: str, port: int) -> bytes:
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n"
        f"x-api-key: {key}\r\nauthorization: Bearer {key}\r\nanthropic-version: 2023-06-01\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def throughput(port: int, path: str, body: bytes, conns: int, seconds: float, key: str | None = None) -> float:
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(i: int) -> None:
        nonlocal done
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
        data = http_post(path, body, key or f"sk-bench-{i}", port)
        while time.perf_counter() < deadline:
            await one_request(reader, writer, data)
            done += 1
        writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(conns)))
    return done / (time.perf_counter() - start)


async def latencies(port: int, path: str, body: bytes, n: int, key: str = "sk-bench-latency") -> list[float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
    data = http_post(path, body, key, port)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await one_request(reader, writer, data)
        out.append(time.perf_counter() - t)
    writer.close()
    return out


async def open_sessions(port: int, path: str, body: bytes, n: int) -> None:
    async def one(i: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
        await one_request(reader, writer, http_post(path, body, f"sk-bench-session-{i}", port))
        writer.close()

    for start in range(0, n, 32):
        await asyncio.gather(*(one(i) for i in range(start, min(n, start + 32))))


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process ``pid`` has used so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--latency-requests", type=int, default=2000)
    ap.add_argument(
        "--litellm", nargs="?", const="litellm", help="also measure a LiteLLM proxy (1 worker): its executable"
    )
    ap.add_argument("--no-stream", action="store_true", help="ask for a JSON answer instead of an event stream")
    ap.add_argument("--profile", type=Path, help="run the proxy under cProfile, its stats written to this file")
    ap.add_argument("--stub", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.stub:
        asyncio.run(run_stub(args.stub))
        return

    body = anthropic_body(stream=not args.no_stream)
    direct_body = orjson.dumps({"model": "stub", "messages": [{"role": "user", "content": "hi"}], "stream": False})
    stub_port, proxy_port, floor_port = free_port(), free_port(), free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "--stub", str(stub_port)])]
    capture = Path(tempfile.mkdtemp(prefix="polar-bench-"))
    profiler = ["-m", "cProfile", "-o", str(args.profile)] if args.profile else []
    try:
        wait_port(stub_port)
        forwarder = HERE / "bench_forwarder.py"
        floor_args = ["--upstream-port", str(stub_port), "--port", str(floor_port)]
        procs.append(subprocess.Popen([sys.executable, str(forwarder), *floor_args]))
        proxy = subprocess.Popen(
            [
                sys.executable,
                *profiler,
                "-m",
                "polar_cli",
                "proxy",
                "--upstream",
                f"http://127.0.0.1:{stub_port}",
                "--port",
                str(proxy_port),
                "--capture-dir",
                str(capture),
                "--allow-unknown-keys",
                "--log-level",
                "warning",
            ]
        )
        procs.append(proxy)
        wait_port(proxy_port)
        wait_port(floor_port)
        print(
            f"request body: {len(body) / 1024:.1f} KB Anthropic Messages, 12 tools, 20 tool turns, "
            f"stream={'false' if args.no_stream else 'true'}"
        )
        for port in (proxy_port, floor_port):  # warm-up
            asyncio.run(throughput(port, "/v1/messages", body, 16, 1.0))
        floor_cpu = cpu_seconds(procs[1].pid)
        floor_rps = asyncio.run(throughput(floor_port, "/v1/messages", body, 16, args.seconds))
        floor_cpu_us = (cpu_seconds(procs[1].pid) - floor_cpu) / max(1.0, floor_rps * args.seconds) * 1e6
        cpu_before = cpu_seconds(proxy.pid)
        rps = asyncio.run(throughput(proxy_port, "/v1/messages", body, 16, args.seconds))
        # the proxy's own CPU per request: steadier than req/s on a machine whose other load comes and goes
        cpu_us = (cpu_seconds(proxy.pid) - cpu_before) / max(1.0, rps * args.seconds) * 1e6
        lat_proxy = asyncio.run(latencies(proxy_port, "/v1/messages", body, args.latency_requests))
        lat_floor = asyncio.run(latencies(floor_port, "/v1/messages", body, args.latency_requests))
        lat_direct = asyncio.run(latencies(stub_port, "/v1/chat/completions", direct_body, args.latency_requests))
        asyncio.run(open_sessions(proxy_port, "/v1/messages", body, 256))
        rss = rss_mb(proxy.pid)
        added50 = pct(lat_proxy, 50) - pct(lat_direct, 50)
        added99 = pct(lat_proxy, 99) - pct(lat_direct, 99)
        floor_added50 = pct(lat_floor, 50) - pct(lat_direct, 50)
        results = {
            "polar_rps_16conn": round(rps, 1),
            "forwarder_rps_16conn": round(floor_rps, 1),
            "polar_share_of_forwarder": round(rps / floor_rps, 3),
            "polar_cpu_us_per_request_16conn": round(cpu_us),
            "forwarder_cpu_us_per_request_16conn": round(floor_cpu_us),
            "polar_p50_ms": round(pct(lat_proxy, 50), 3),
            "polar_p99_ms": round(pct(lat_proxy, 99), 3),
            "direct_p50_ms": round(pct(lat_direct, 50), 3),
            "direct_p99_ms": round(pct(lat_direct, 99), 3),
            "polar_added_p50_ms": round(added50, 3),
            "polar_added_p99_ms": round(added99, 3),
            "forwarder_p50_ms": round(pct(lat_floor, 50), 3),
            "forwarder_added_p50_ms": round(floor_added50, 3),
            "polar_rss_mb_after_256_sessions": round(rss, 1),
        }
        print(json.dumps(results, indent=2))
        if args.litellm:
            try:
                litellm = bench_litellm(stub_port, body, args)
            except Exception as exc:  # the comparison is optional; Polar's figures are already printed
                litellm = {"litellm": f"failed: {exc}"}
            print(json.dumps(litellm, indent=2))
            if "litellm_rps_16conn" in litellm:
                print(f"ratio polar/litellm: {rps / float(litellm['litellm_rps_16conn']):.1f}x throughput")
        for name, ok in (
            ("rps >= 35% of the forwarder's", rps >= 0.35 * floor_rps),
            ("added p50 <= 0.8 ms", added50 <= 0.8),
            ("RSS <= 200 MB", rss <= 200),
        ):
            print(f"target {name}: {'met' if ok else 'NOT met'}")
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
        shutil.rmtree(capture, ignore_errors=True)


LITELLM_KEY = "sk-bench-litellm-master-key"


def bench_litellm(stub_port: int, body: bytes, args: argparse.Namespace) -> dict[str, float | str]:
    exe = shutil.which(args.litellm)
    if exe is None:
        return {"litellm": f"{args.litellm} not found"}
    port = free_port()
    config = Path(tempfile.mkdtemp()) / "litellm.yaml"
    config.write_text(
        "model_list:\n  - model_name: claude-opus-5-5\n    litellm_params:\n      model: hosted_vllm/stub\n"
        f"      api_base: http://127.0.0.1:{stub_port}/v1\n      api_key: none\n"
        "      rpm: 100000000\n      tpm: 100000000000\n"
        "general_settings:\n  max_parallel_requests: 100000\n  global_max_parallel_requests: 100000\n"
    )
    proc = subprocess.Popen(
        [exe, "--config", str(config), "--port", str(port), "--num_workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "LITELLM_LOG": "ERROR", "LITELLM_MASTER_KEY": LITELLM_KEY},
    )  # fmt: skip
    try:
        wait_port(port, 120)
        asyncio.run(throughput(port, "/v1/messages", body, 16, 1.0, LITELLM_KEY))
        rps = asyncio.run(throughput(port, "/v1/messages", body, 16, args.seconds, LITELLM_KEY))
        lat = asyncio.run(latencies(port, "/v1/messages", body, min(500, args.latency_requests), LITELLM_KEY))
        return {"litellm_rps_16conn": round(rps, 1), "litellm_p50_ms": round(pct(lat, 50), 3)}
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
