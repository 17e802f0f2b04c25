"""Hostile input never crashes the gateway: it answers 4xx (or closes), and /health still answers afterwards."""

from __future__ import annotations

import json
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polar_cli.gateway.server import ServerLimits
from polar_cli.wire.http11 import Limits
from tests.support.gateway import RunningGateway, running_gateway
from tests.support.sglang_double import SGLangDouble

DATA = Path(__file__).parents[2] / "data" / "harness_requests"
KEY = "sk-fuzz"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    limits = ServerLimits(http=Limits(max_header_bytes=16 * 1024, max_body_bytes=4 * 1024 * 1024), request_timeout=1.0)
    with SGLangDouble() as upstream, running_gateway(upstream.url, tmp_path_factory.mktemp("cap"), limits=limits) as gw:
        gw.sessions.open("fuzz", KEY)
        yield gw


def exchange(port: int, data: bytes, *, timeout: float = 5.0, half_close: bool = True) -> bytes:
    """Send raw bytes, half-close (unless told not to), and read whatever comes back until the server closes.

    A half-close while a call waits on the model counts as a hang-up (the call is cancelled), so requests that reach
    the upstream are sent without it (they carry ``connection: close``).
    """
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if half_close:
            s.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def status_of(raw: bytes) -> int | None:
    if not raw:
        return None
    line = raw.split(b"\r\n", 1)[0].split()
    return int(line[1])


def post(path: str, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    h = {"host": "x", "content-length": str(len(body)), "x-api-key": KEY, "authorization": f"Bearer {KEY}"}
    h.update(headers or {})
    head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "connection: close\r\n\r\n"
    return head.encode() + body


def assert_healthy(gw: RunningGateway) -> None:
    raw = exchange(gw.port, b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
    assert status_of(raw) == 200, raw[:200]


PATHS = [
    "/v1/messages",
    "/v1/chat/completions",
    "/v1/responses",
    "/v1beta/models/m:generateContent",
    "/v1beta/models/m:streamGenerateContent?alt=sse",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=2048))
def test_random_bytes(gateway: RunningGateway, data: bytes) -> None:
    status = status_of(exchange(gateway.port, data))
    assert status is None or 400 <= status < 500 or status == 505


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(PATHS), st.integers(min_value=0, max_value=200))
def test_truncated_json(gateway: RunningGateway, path: str, cut: int) -> None:
    body = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "contents": [{"parts": [{"text": "x"}]}]}'
    raw = exchange(gateway.port, post(path, body[: min(cut, len(body) - 1)]))
    assert status_of(raw) == 400, raw[:300]
    json.loads(raw.split(b"\r\n\r\n", 1)[1])  # the error body is JSON in the API's shape


def _recorded_bodies() -> list[tuple[str, dict]]:
    out = []
    for f in sorted(DATA.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r.get("api") and isinstance(r.get("body"), dict):
                q = "?alt=sse" if "stream" in r["path"] else ""
                out.append((r["path"] + q, r["body"]))
    return out


RECORDED = _recorded_bodies()
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _mutate(value: object, rng: random.Random, replacement: object) -> object:
    """Replace one randomly chosen node of a JSON document."""
    if isinstance(value, dict) and value and rng.random() < 0.8:
        key = rng.choice(list(value))
        return {**value, key: _mutate(value[key], rng, replacement)}
    if isinstance(value, list) and value and rng.random() < 0.8:
        i = rng.randrange(len(value))
        return [*value[:i], _mutate(value[i], rng, replacement), *value[i + 1 :]]
    return replacement


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(range(len(RECORDED))), st.integers(0, 2**32), JSON_VALUES)
def test_wrong_types_in_real_requests(gateway: RunningGateway, index: int, seed: int, replacement: object) -> None:
    path, body = RECORDED[index]
    mutated = _mutate(body, random.Random(seed), replacement)
    raw = exchange(gateway.port, post(path, json.dumps(mutated).encode()), half_close=False)
    status = status_of(raw)
    assert status is not None and (status == 200 or 400 <= status < 500), raw[:400]


def test_invalid_utf8_huge_headers_and_slow_clients(gateway: RunningGateway) -> None:
    raw = exchange(gateway.port, post("/v1/messages", b'{"model": "\xff\xfe", "messages": []}'))
    assert status_of(raw) == 400
    raw = exchange(gateway.port, b"POST /v1/messages HTTP/1.1\r\nx-big: " + b"a" * 40_000 + b"\r\n\r\n")
    assert status_of(raw) == 431
    # a slow client dribbling its head: cut off with 408 after request_timeout, while others are served meanwhile
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=10) as slow:
        started = time.monotonic()
        for byte in b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n":
            try:
                slow.send(bytes([byte]))
            except OSError:
                break
            time.sleep(0.05)
            if time.monotonic() - started > 0.5:
                assert_healthy(gateway)
        reply = slow.recv(65536)
        assert status_of(reply) == 408
        assert time.monotonic() - started < 5


def test_still_healthy_after_everything(gateway: RunningGateway) -> None:
    assert_healthy(gateway)
