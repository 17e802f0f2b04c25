"""Run each network attack against a `polar proxy`-like server (tests/unit/gateway/hostile_server.py: the real
GatewayServer and Gateway over a canned in-process upstream) in a subprocess on loopback, one fresh server per
attack, and print: attempts, whether the server still answered a model call during and after, its peak RSS growth
(MB) and its log growth (bytes per minute).

    .venv/bin/python scripts/bench_hostile.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import gzip
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.unit.gateway.hostile_server import call_bytes, exchange, serves


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):  # peak resident set size
            return int(line.split()[1]) / 1024
    return 0.0


def _connect(port: int, source: str = "127.0.0.1") -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0))


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


def _bomb(encoding: str, encode: Callable[[bytes], bytes]) -> Callable[[int, float], int]:
    body = encode(b"\0" * (1 << 30))  # 1 GiB of zeros: ~1 MB compressed
    name = "deflate" if encoding == "deflate-raw" else encoding
    head = (
        f"POST /v1/messages HTTP/1.1\r\nx-api-key: x\r\ncontent-encoding: {name}\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    data = head.encode() + body

    def attack(port: int, seconds: float) -> int:
        n, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            exchange(port, data)
            n += 1
        return n

    return attack


def slow_loris(port: int, seconds: float) -> int:
    n, data = 0, call_bytes()
    with ExitStack() as stack:
        socks = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if len(socks) < 400:
                socks += [stack.enter_context(_connect(port)) for _ in range(50)]
                n += 50
            for i, sock in enumerate(socks):  # a byte each, then wait: never idle, never done
                try:
                    sock.send(data[i % 8 : i % 8 + 1])
                except OSError:
                    socks[i] = stack.enter_context(_connect(port))
                    n += 1
            time.sleep(0.5)
    return n


def idle_flood(port: int, seconds: float) -> int:
    n = 0
    with ExitStack() as stack:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                stack.enter_context(_connect(port))
                n += 1
            except OSError:
                time.sleep(0.05)
    return n


def connect_drop(port: int, seconds: float) -> int:
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        with _connect(port):
            n += 1
    return n


def header_flood(port: int, seconds: float) -> int:
    many = b"".join(b"x-h%d: %s\r\n" % (i, b"v" * 500) for i in range(200))
    data = b"POST /v1/messages HTTP/1.1\r\n" + many + b"\r\n"
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        exchange(port, data)
        n += 1
    return n


def bad_lengths(port: int, seconds: float) -> int:
    data = "POST /v1/messages HTTP/1.1\r\ncontent-length: \u00b2\r\n\r\n".encode("latin-1")
    huge = b"POST /v1/messages HTTP/1.1\r\ncontent-length: " + b"9" * 5000 + b"\r\n\r\n"
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        exchange(port, data if n % 2 else huge)
        n += 1
    return n


ATTACKS: dict[str, tuple[Callable[[int, float], int], tuple[str, ...]]] = {
    "slow-loris (400 conns, a byte / 0.5 s)": (slow_loris, ("--request-timeout", "3")),
    "idle flood (hold every conn)": (idle_flood, ()),
    "connect-and-drop flood": (connect_drop, ()),
    "header flood (200 x 500 B)": (header_flood, ()),
    "Content-Length ² / 5,000 digits": (bad_lengths, ()),
    "gzip bomb (1 GiB)": (_bomb("gzip", gzip.compress), ()),
    "zlib deflate bomb (1 GiB)": (_bomb("deflate", zlib.compress), ()),
    "raw deflate bomb (1 GiB)": (_bomb("deflate-raw", _raw_deflate), ()),
    "descriptor exhaustion (nofile 256)": (idle_flood, ("--nofile", "256", "--max-connections", "100000")),
}


def run(name: str, attack: Callable[[int, float], int], args: tuple[str, ...], seconds: float) -> str:
    cmd = [sys.executable, "-m", "tests.unit.gateway.hostile_server", "--seconds", str(seconds + 30), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=Path(__file__).parents[1])
    assert proc.stdout is not None and proc.stderr is not None
    port = int(proc.stdout.readline())
    log: list[bytes] = []
    reader = threading.Thread(target=lambda: log.extend(iter(proc.stderr.readline, b"")), daemon=True)  # type: ignore[union-attr]
    reader.start()
    serves(port)
    base = _rss_mb(proc.pid)
    during: list[bool] = []
    probe_stop = threading.Event()

    def probe() -> None:  # another peer's model call, every second of the attack
        while not probe_stop.wait(1.0):
            during.append(serves(port, source="127.0.0.7"))

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    started = time.monotonic()
    count = attack(port, seconds)
    elapsed = time.monotonic() - started
    probe_stop.set()
    prober.join()
    after = any(serves(port) or time.sleep(1) for _ in range(10))
    peak = _rss_mb(proc.pid) - base
    proc.terminate()
    proc.wait(10)
    reader.join(5)
    log_bytes = sum(map(len, log))
    served = f"{sum(during)}/{len(during)}"
    return (
        f"{name:40} {count:>8} {served:>8} {'yes' if after else 'NO':>6} {peak:>8.1f} {log_bytes * 60 / elapsed:>10.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each attack")
    args = parser.parse_args()
    print(f"{'attack':40} {'tried':>8} {'during':>8} {'after':>6} {'RSS +MB':>8} {'log B/min':>10}")
    for name, (attack, server_args) in ATTACKS.items():
        print(run(name, attack, server_args, args.seconds), flush=True)


if __name__ == "__main__":
    main()
