"""Hostile input to the HTTP/1.1 parser: every byte string ends in a message, NEED_DATA or the side's own error with
a status, never another exception; decoded bodies respect the body limit in every encoding."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from polar_cli.errors import PeerProtocolError, UpstreamProtocolError
from polar_cli.wire.http11 import NEED_DATA, Limits, RequestParser, ResponseParser

SMALL = Limits(max_header_bytes=512, max_headers=8, max_body_bytes=4096)


def drain(parser: RequestParser | ResponseParser, chunks: list[bytes]) -> None:
    """Feed ``chunks`` then EOF, pulling events; only the side's own protocol error may come out."""
    for chunk in [*chunks, b""]:
        parser.receive_data(chunk)
        for _ in range(64):
            if parser.next_event() is NEED_DATA:
                break


# what a fuzzer would not guess on its own: the parser's keywords, in a message's order or glued at random
_START = st.sampled_from([b"POST /v1/messages HTTP/1.1\r\n", b"HTTP/1.1 200 OK\r\n", b"GET http://x/y?z HTTP/1.0\r\n"])
_HEADER = st.sampled_from(
    [
        b"Content-Length: 5\r\n",
        b"Content-Length: \xb2\r\n",  # latin-1 "²": str.isdigit() says yes, int() says no
        b"Content-Length: 99999999999999999999\r\n",
        b"Content-Length: -1\r\n",
        b"Transfer-Encoding: chunked\r\n",
        b"Content-Encoding: gzip\r\n",
        b"Content-Encoding: deflate\r\n",
        b"Content-Encoding: br\r\n",
        b"Expect: 100-continue\r\n",
        b"Connection: close\r\n",
    ]
)
_BODY = st.sampled_from(
    [b"5\r\nhello\r\n", b"0x5\r\n", b"\xb2\r\n", b"0\r\n\r\n", b"f" * 20 + b"\r\n", gzip.compress(b"{}"), b"hello"]
)
_STRUCTURED = st.tuples(
    _START, st.lists(st.one_of(_HEADER, st.binary(max_size=20)), max_size=5), st.lists(_BODY, max_size=4)
).map(lambda t: t[0] + b"".join(t[1]) + b"\r\n" + b"".join(t[2]))
_GLUED = st.lists(st.one_of(_START, _HEADER, _BODY, st.just(b"\r\n"), st.binary(max_size=40)), max_size=12).map(
    b"".join
)
_MESSAGE = st.one_of(_STRUCTURED, _GLUED)


@settings(max_examples=400, deadline=None)
@given(data=_MESSAGE, cut=st.integers(min_value=1, max_value=64))
def test_request_parser_raises_only_peer_errors(data: bytes, cut: int) -> None:
    chunks = [data[i : i + cut] for i in range(0, len(data), cut)]
    try:
        drain(RequestParser(SMALL), chunks)
    except PeerProtocolError as exc:
        assert 400 <= exc.status < 600


@settings(max_examples=400, deadline=None)
@given(data=_MESSAGE, cut=st.integers(min_value=1, max_value=64))
def test_response_parser_raises_only_upstream_errors(data: bytes, cut: int) -> None:
    chunks = [data[i : i + cut] for i in range(0, len(data), cut)]
    try:
        drain(ResponseParser(SMALL), chunks)
    except UpstreamProtocolError as exc:
        assert exc.status == 502


@pytest.mark.parametrize(
    "length", ["\u00b2", "\u0663", "\uff15", "1" * 4301, "9" * 17, "+5", "-0", "0x5", "5_0", "", "1e3", "5 5"]
)
def test_bad_content_length_is_a_clean_400(length: str) -> None:
    parser = RequestParser(Limits())
    head = f"POST /v1/messages HTTP/1.1\r\nContent-Length: {length}\r\n\r\n"
    # latin-1 where it can (b"\xb2" reads back as "²", the case), else UTF-8 bytes
    parser.receive_data(head.encode("latin-1") if max(map(ord, head)) < 256 else head.encode())
    with pytest.raises(PeerProtocolError) as exc:
        parser.next_event()
    assert exc.value.status == 400


def test_bad_content_length_from_upstream_is_a_502() -> None:
    parser = ResponseParser(Limits())
    parser.receive_data("HTTP/1.1 200 OK\r\nContent-Length: \u00b2\r\n\r\n".encode())
    with pytest.raises(UpstreamProtocolError):
        parser.next_event()


@pytest.mark.parametrize("size", [b"0x5", b"+5", b"5_0", b"1" * 4301, b"f" * 17, b"\xd9\xa3", b"-1", b""])
def test_bad_chunk_size_is_a_clean_400(size: bytes) -> None:
    parser = RequestParser(Limits())
    parser.receive_data(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + size + b"\r\nhello\r\n0\r\n\r\n")
    with pytest.raises(PeerProtocolError) as exc:
        parser.next_event()
    assert exc.value.status == 400


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


ENCODERS = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,  # the zlib format RFC 9110 names
    "deflate-raw": _raw_deflate,  # what some clients send as "deflate"
}


def _post(encoding: str, body: bytes) -> bytes:
    name = "deflate" if encoding == "deflate-raw" else encoding
    head = f"POST /v1/messages HTTP/1.1\r\nContent-Encoding: {name}\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_compression_bomb_is_a_413_in_every_encoding(encoding: str) -> None:
    bomb = ENCODERS[encoding](b"\0" * (2 * 1024 * 1024))  # ~2 KiB, under the limit, that inflates to 2 MiB
    assert len(bomb) < SMALL.max_body_bytes
    parser = RequestParser(SMALL)
    parser.receive_data(_post(encoding, bomb))
    with pytest.raises(PeerProtocolError) as exc:
        parser.next_event()
    assert exc.value.status == 413


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_a_body_within_the_limit_decodes_in_every_encoding(encoding: str) -> None:
    body = b'{"model":"m","messages":[]}' * 100
    parser = RequestParser(SMALL)
    parser.receive_data(_post(encoding, ENCODERS[encoding](body)))
    event = parser.next_event()
    assert event is not NEED_DATA and event.body == body  # type: ignore[union-attr]


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, gzip", "identity, br"])
def test_unsupported_encodings_are_a_415(encoding: str) -> None:
    parser = RequestParser(SMALL)
    parser.receive_data(_post(encoding, b"\x28\xb5\x2f\xfd" + b"\0" * 64))
    with pytest.raises(PeerProtocolError) as exc:
        parser.next_event()
    assert exc.value.status == 415


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_corrupt_or_truncated_compressed_bodies_are_a_400(encoding: str) -> None:
    good = ENCODERS[encoding](b"x" * 1000)
    for body in (good[: len(good) // 2], b"\xff" * 32):
        parser = RequestParser(SMALL)
        parser.receive_data(_post(encoding, body))
        with pytest.raises(PeerProtocolError) as exc:
            parser.next_event()
        assert exc.value.status == 400


def test_header_count_and_size_limits() -> None:
    many = b"".join(b"X-%d: 1\r\n" % i for i in range(SMALL.max_headers + 1))
    parser = RequestParser(SMALL)
    parser.receive_data(b"POST / HTTP/1.1\r\n" + many + b"\r\n")
    with pytest.raises(PeerProtocolError) as exc:
        parser.next_event()
    assert exc.value.status == 431
    parser = RequestParser(SMALL)
    parser.receive_data(b"POST / HTTP/1.1\r\nX-Big: " + b"a" * SMALL.max_header_bytes)  # no end of head yet
    with pytest.raises(PeerProtocolError) as exc:
        parser.next_event()
    assert exc.value.status == 431
