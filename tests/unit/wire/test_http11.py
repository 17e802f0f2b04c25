from __future__ import annotations

import gzip
import zlib

import pytest

from polar_cli.errors import PeerProtocolError, UpstreamProtocolError
from polar_cli.wire.http11 import (
    NEED_DATA,
    Limits,
    Request,
    RequestParser,
    Response,
    ResponseParser,
    encode_chunk,
)

BODY = b'{"model":"m","messages":[]}'
SIMPLE = b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nX-Api-Key: k\r\n\r\n%s" % (
    len(BODY),
    BODY,
)


def feed(parser: RequestParser, data: bytes, *, bytewise: bool = False) -> list[Request]:
    out = []
    chunks = [data[i : i + 1] for i in range(len(data))] if bytewise else [data]
    for chunk in chunks:
        parser.receive_data(chunk)
        while (event := parser.next_event()) is not NEED_DATA:
            assert isinstance(event, Request)
            out.append(event)
    return out


@pytest.mark.parametrize("bytewise", [False, True])
def test_request_whole_and_byte_by_byte(bytewise: bool) -> None:
    (req,) = feed(RequestParser(Limits()), SIMPLE, bytewise=bytewise)
    assert (req.method, req.path, req.query, req.body) == ("POST", "/v1/messages", "beta=true", BODY)
    assert req.headers["x-api-key"] == "k" and req.keep_alive


def test_pipelined_requests_come_out_in_order_and_trailing_garbage_fails_after() -> None:
    parser = RequestParser(Limits())
    reqs = feed(parser, SIMPLE + SIMPLE.replace(b"messages", b"responses"))
    assert [r.path for r in reqs] == ["/v1/messages", "/v1/responses"]
    parser.receive_data(b"\x00\x01garbage\r\n\r\n")
    with pytest.raises(PeerProtocolError) as exc:
        parser.next_event()
    assert exc.value.status == 400


def test_chunked_body_with_extensions_and_trailers() -> None:
    chunked = b"".join(encode_chunk(BODY[i : i + 5]) for i in range(0, len(BODY), 5)).replace(b"\r\n", b";ext=1\r\n", 1)
    data = (
        b"POST /v1/chat/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\nX-T: 1\r\n\r\n"
    )
    for bytewise in (False, True):
        (req,) = feed(RequestParser(Limits()), data, bytewise=bytewise)
        assert req.body == BODY


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [("gzip", gzip.compress), ("deflate", zlib.compress), ("deflate", lambda b: zlib.compress(b, wbits=-15))],
)
def test_compressed_bodies_are_decoded(encoding: str, compress: object) -> None:
    payload = compress(BODY)  # type: ignore[operator]
    data = b"POST /v1/responses HTTP/1.1\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        encoding.encode(),
        len(payload),
        payload,
    )
    (req,) = feed(RequestParser(Limits()), data)
    assert req.body == BODY


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
        (b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n", 413),
        (b"POST / HTTP/2.0\r\n\r\n", 505),
        (b"POST / HTTP/1.1\r\nbad header\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nContent-Encoding: br\r\nContent-Length: 1\r\n\r\nx", 415),
        (b"POST / HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nnope", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400),
        (b"\xff\xfe / HTTP/1.1\r\n\r\n", 400),
    ],
)
def test_malformed_requests_carry_the_status_to_answer(data: bytes, status: int) -> None:
    parser = RequestParser(Limits(max_body_bytes=1 << 20))
    parser.receive_data(data)
    with pytest.raises(PeerProtocolError) as exc:
        parser.next_event()
    assert exc.value.status == status
    with pytest.raises(PeerProtocolError):  # the parser stays dead
        parser.next_event()


def test_head_and_decompression_limits() -> None:
    parser = RequestParser(Limits(max_header_bytes=100))
    parser.receive_data(b"POST / HTTP/1.1\r\nX: " + b"a" * 200)
    with pytest.raises(PeerProtocolError) as exc:
        parser.next_event()
    assert exc.value.status == 431
    bomb = gzip.compress(b"0" * 100_000)
    parser = RequestParser(Limits(max_body_bytes=10_000))
    parser.receive_data(
        b"POST / HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(bomb), bomb)
    )
    with pytest.raises(PeerProtocolError) as exc:
        parser.next_event()
    assert exc.value.status == 413


def test_path_is_known_to_errors_after_the_request_line() -> None:
    parser = RequestParser(Limits())
    parser.receive_data(b"POST /v1beta/models/g:generateContent HTTP/1.1\r\nContent-Length: x\r\n\r\n")
    with pytest.raises(PeerProtocolError) as exc:
        parser.next_event()
    assert exc.value.path == "/v1beta/models/g:generateContent"


def test_keep_alive_rules_and_expect_continue() -> None:
    (req,) = feed(RequestParser(Limits()), b"GET /health HTTP/1.0\r\n\r\n")
    assert not req.keep_alive
    (req,) = feed(RequestParser(Limits()), b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert not req.keep_alive
    parser = RequestParser(Limits())
    parser.receive_data(b"POST /v1/messages HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n")
    assert parser.next_event() is NEED_DATA and parser.wants_continue()
    parser.receive_data(b"{}")
    assert isinstance(parser.next_event(), Request)


def test_eof_mid_body_is_an_error_and_clean_eof_is_not() -> None:
    parser = RequestParser(Limits())
    parser.receive_data(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc")
    parser.receive_data(b"")
    with pytest.raises(PeerProtocolError):
        parser.next_event()
    parser = RequestParser(Limits())
    parser.receive_data(b"")
    assert parser.next_event() is NEED_DATA and parser.peer_closed


def test_response_parser_length_chunked_and_until_close() -> None:
    p = ResponseParser(Limits())
    p.receive_data(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
    resp = p.next_event()
    assert isinstance(resp, Response) and (resp.status, resp.body, resp.keep_alive) == (200, b"{}", True)
    p = ResponseParser(Limits())
    p.receive_data(b"HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n" + encode_chunk(b"abc") + b"0\r\n\r\n")
    resp = p.next_event()
    assert isinstance(resp, Response) and (resp.status, resp.body) == (503, b"abc")
    p = ResponseParser(Limits())
    p.receive_data(b"HTTP/1.0 200 OK\r\n\r\nbody")
    assert p.next_event() is NEED_DATA
    p.receive_data(b"")
    resp = p.next_event()
    assert isinstance(resp, Response) and resp.body == b"body" and not resp.keep_alive


@pytest.mark.parametrize(
    "data",
    [b"HTTP/1.1 2x0 OK\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", b"SPDY 200\r\n\r\n"],
)
def test_an_upstreams_broken_answer_is_its_fault_not_the_callers(data: bytes) -> None:
    parser = ResponseParser(Limits())
    parser.receive_data(data)
    with pytest.raises(UpstreamProtocolError) as exc:
        parser.next_event()
    assert exc.value.status == 502 and not isinstance(exc.value, PeerProtocolError)
