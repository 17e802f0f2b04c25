"""The egress proxy on a real event loop, its session socket and a destination HTTP server on 127.0.0.1: allowed
tunnels and forwarded requests reach it, everything else gets its status, every attempt is logged, and no hostile
peer takes the proxy down. Names resolve through a table (`NAMES`): what real DNS does is not shown here."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

from polar_cli.egress.policy import Allowlist, allowlist
from polar_cli.egress.proxy import EGRESS_SOCKET_NAME, EgressLimits, EgressLog, EgressProxy

T = TypeVar("T")
NAMES = {"registry.test": "127.0.0.1", "mirror.test": "127.0.0.1"}


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.path} via {self.headers.get('Host')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def destination() -> Iterator[int]:
    """An HTTP server on 127.0.0.1 standing in for an allowed registry; its port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


async def table(host: str, port: int) -> list[str]:
    if host in NAMES:
        return [NAMES[host]]
    raise OSError(f"unknown host {host}")


@dataclass
class Running:
    proxy: EgressProxy
    loop: asyncio.AbstractEventLoop
    socket: Path

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(10)
        sock.connect(str(self.socket))
        return sock

    def ask(self, data: bytes) -> bytes:
        """Send ``data``, half-close, read to EOF."""
        with self.connect() as sock:
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)
            return read_all(sock)

    def close(self) -> EgressLog:
        return self.call(self.proxy.close("s1"))


def read_all(sock: socket.socket) -> bytes:
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got


@contextmanager
def running(rules: Allowlist, tmp_path: Path, limits: EgressLimits | None = None) -> Iterator[Running]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    proxy = EgressProxy(limits, resolve=table)
    directory = asyncio.run_coroutine_threadsafe(proxy.open("s1", rules, str(tmp_path)), loop).result(10)
    try:
        yield Running(proxy, loop, directory / EGRESS_SOCKET_NAME)
    finally:
        asyncio.run_coroutine_threadsafe(proxy.aclose(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def rules_for(port: int, **kw: Any) -> Allowlist:
    return allowlist(["registry.test", "*.allowed.test"], ports=[port], private_addresses=True, **kw)


def test_an_allowed_tunnel_and_a_forwarded_request_reach_the_host_and_are_logged(
    destination: int, tmp_path: Path
) -> None:
    with running(rules_for(destination), tmp_path) as proxy:
        with proxy.connect() as sock:
            sock.sendall(f"CONNECT registry.test:{destination} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert sock.recv(4096) == b"HTTP/1.1 200 Connection established\r\n\r\n"
            sock.sendall(b"GET /tunnelled HTTP/1.1\r\nHost: registry.test\r\nConnection: close\r\n\r\n")
            tunnelled = read_all(sock)
        forwarded = proxy.ask(f"GET http://registry.test:{destination}/plain HTTP/1.1\r\nHost: r\r\n\r\n".encode())
        log = proxy.close()
    assert tunnelled.startswith(b"HTTP/1.0 200") and tunnelled.endswith(b"hello from /tunnelled via registry.test")
    assert forwarded.startswith(b"HTTP/1.0 200") and forwarded.endswith(b"hello from /plain via r")
    tunnel, plain = log.entries
    assert (tunnel.host, tunnel.port, tunnel.method, tunnel.decision, tunnel.status) == (
        "registry.test",
        destination,
        "CONNECT",
        "allowed",
        200,
    )
    assert tunnel.bytes_up > 0 and tunnel.bytes_down == len(tunnelled) and tunnel.error is None
    assert (plain.method, plain.decision, plain.status, plain.bytes_down) == ("GET", "allowed", None, len(forwarded))
    assert all(e.time.endswith("+00:00") and e.seconds >= 0 for e in log.entries)
    assert not proxy.socket.parent.exists(), "closing removes the session's socket directory"


def test_refusals_get_403_and_are_logged(destination: int, tmp_path: Path) -> None:
    with running(rules_for(destination), tmp_path) as proxy:
        other = proxy.ask(f"CONNECT example.com:{destination} HTTP/1.1\r\n\r\n".encode())
        port = proxy.ask(b"CONNECT registry.test:22 HTTP/1.1\r\n\r\n")
        plain = proxy.ask(f"GET http://mirror.test:{destination}/ HTTP/1.1\r\n\r\n".encode())
        log = proxy.close()
    for answer in (other, port, plain):
        assert answer.startswith(b"HTTP/1.1 403 Forbidden\r\n"), answer
    assert b"host not in the allowlist" in other
    assert [(e.host, e.port, e.decision, e.reason, e.status) for e in log.entries] == [
        ("example.com", destination, "refused", "host not in the allowlist", 403),
        ("registry.test", 22, "refused", "port 22 not allowed", 403),
        ("mirror.test", destination, "refused", "host not in the allowlist", 403),
    ]
    assert all(e.bytes_up == 0 == e.bytes_down for e in log.entries)


def test_an_allowed_name_that_resolves_to_a_private_address_is_refused(destination: int, tmp_path: Path) -> None:
    with running(Allowlist(("registry.test",), (destination,)), tmp_path) as proxy:
        answer = proxy.ask(f"CONNECT registry.test:{destination} HTTP/1.1\r\n\r\n".encode())
        log = proxy.close()
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert (log.entries[0].decision, log.entries[0].reason) == ("refused", "127.0.0.1 is not a public address")


def test_a_destination_that_fails_gets_502(tmp_path: Path) -> None:
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()  # nothing listens there now
    with running(rules_for(port), tmp_path) as proxy:
        refused = proxy.ask(f"CONNECT registry.test:{port} HTTP/1.1\r\n\r\n".encode())
        unknown = proxy.ask(f"CONNECT gone.allowed.test:{port} HTTP/1.1\r\n\r\n".encode())
        log = proxy.close()
    assert refused.startswith(b"HTTP/1.1 502 ") and unknown.startswith(b"HTTP/1.1 502 ")
    assert [(e.decision, e.status) for e in log.entries] == [("allowed", 502), ("allowed", 502)]
    assert "connecting to 127.0.0.1" in (log.entries[0].error or "")
    assert "unknown host gone.allowed.test" in (log.entries[1].error or "")


def test_hostile_peers_get_clean_errors_and_the_proxy_keeps_serving(destination: int, tmp_path: Path) -> None:
    limits = EgressLimits(head_bytes=4096, head_lines=20, head_timeout=0.5)
    with running(rules_for(destination), tmp_path, limits) as proxy:
        answers = {
            "garbage": proxy.ask(b"\x16\x03\x01\x02\x00 hello\r\n\r\n"),
            "no port": proxy.ask(b"CONNECT registry.test HTTP/1.1\r\n\r\n"),
            "huge head": proxy.ask(b"CONNECT registry.test:443 HTTP/1.1\r\nX: " + b"a" * 10_000 + b"\r\n\r\n"),
            "many lines": proxy.ask(b"CONNECT registry.test:443 HTTP/1.1\r\n" + b"X: y\r\n" * 50 + b"\r\n"),
        }
        with proxy.connect() as slow:  # slow-loris: a head that never ends
            slow.sendall(b"CONNECT registry.test:")
            answers["slow"] = read_all(slow)
        with proxy.connect() as cut:  # closed inside its head: no answer, logged
            cut.sendall(b"CONNECT regis")
        with proxy.connect():  # a relay probe: connects, sends nothing; not logged
            pass
        good = proxy.ask(f"GET http://registry.test:{destination}/still HTTP/1.1\r\n\r\n".encode())
        log = proxy.close()
    statuses = {name: answer.split(b"\r\n", 1)[0] for name, answer in answers.items()}
    assert statuses == {
        "garbage": b"HTTP/1.1 400 Bad Request",
        "no port": b"HTTP/1.1 400 Bad Request",
        "huge head": b"HTTP/1.1 431 Request Header Fields Too Large",
        "many lines": b"HTTP/1.1 431 Request Header Fields Too Large",
        "slow": b"HTTP/1.1 408 Request Timeout",
    }
    assert good.endswith(b"hello from /still via None")
    refused = [e for e in log.entries if e.decision == "refused"]
    assert len(refused) == 6 and all(e.reason.startswith("bad request: ") for e in refused)
    assert [e.decision for e in log.entries].count("allowed") == 1


def test_connections_past_the_cap_get_503_and_closing_ends_open_tunnels(destination: int, tmp_path: Path) -> None:
    limits = EgressLimits(max_connections=2)
    with running(rules_for(destination), tmp_path, limits) as proxy:
        held = [proxy.connect() for _ in range(2)]
        for sock in held:
            sock.sendall(f"CONNECT registry.test:{destination} HTTP/1.1\r\n\r\n".encode())
            assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
        over = proxy.ask(f"CONNECT registry.test:{destination} HTTP/1.1\r\n\r\n".encode())
        log = proxy.close()
        ended = [read_all(sock) for sock in held]
        for sock in held:
            sock.close()
    assert over.startswith(b"HTTP/1.1 503 ")
    assert ended == [b"", b""]
    assert sorted((e.decision, e.status, e.error) for e in log.entries) == [
        ("allowed", 200, "the session ended"),
        ("allowed", 200, "the session ended"),
        ("refused", 503, None),
    ]


def test_the_log_is_capped_and_counts_what_it_dropped(destination: int, tmp_path: Path) -> None:
    with running(rules_for(destination), tmp_path, EgressLimits(max_entries=2)) as proxy:
        for _ in range(5):
            proxy.ask(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")
        log = proxy.close()
    assert len(log.entries) == 2 and log.dropped == 3
    rows = log.to_rows()
    assert rows[-1] == {"decision": "not logged", "count": 3, "reason": "past the per-session cap"}
    assert rows[0]["host"] == "example.com" and rows[0]["decision"] == "refused"
