"""Sans-IO HTTP/1.1 message parsing and encoding: bytes in, whole messages out.

`RequestParser` (server side) and `ResponseParser` (the upstream client) share one reader. Feed bytes with
``receive_data`` (``b""`` means the peer closed) and pull messages with ``next_event``, which returns a `Request` /
`Response`, or `NEED_DATA`. The gateway only ever acts on whole messages (it must parse the JSON body before it can do
anything), so bodies are buffered, within limits, and handed over complete.

Rule 1: a message with both Content-Length and Transfer-Encoding is refused (400), never guessed at: that ambiguity is
the root of request smuggling.
Rule 2: limits are checked as bytes arrive, before buffering more, so a peer cannot make us hold more than the limit
(headers, body, and the body after decompression).
Rule 3: errors carry the status to answer with. After one, the parser is dead: the connection must close. A request's
faults are the caller's (`PeerProtocolError`, 4xx), a response's the upstream's (`UpstreamProtocolError`, 502).
"""

from __future__ import annotations

import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Final, Literal

from polar_cli.errors import PeerProtocolError, UpstreamProtocolError


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()

Headers = dict[str, str]


@dataclass(frozen=True, slots=True)
class Limits:
    max_header_bytes: int = 64 * 1024
    max_headers: int = 128
    max_body_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    target: str
    path: str
    query: str
    # names lower-cased; a repeated header keeps its values joined with ", " (RFC 9110 5.3)
    headers: Headers
    body: bytes
    keep_alive: bool


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    reason: str
    headers: Headers
    body: bytes
    keep_alive: bool


_DIGITS = frozenset("0123456789")
_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")
# Content-Length and chunk sizes: 16 digits is far past any body limit and far below int()'s 4,300-digit refusal
_MAX_DIGITS = 16
# decoded bytes per step of inflating a body
_INFLATE_STEP = 1024 * 1024
_TOKEN_CHARS = frozenset(b"!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


class _Reader(ABC):
    """Shared state machine: head, then body by Content-Length, by chunks, or (responses only) until close.

    A parser only ever reads the peer's bytes, so every fault it finds is the peer's; which error that is depends on
    who the peer is (``error``): a harness's broken request is a 4xx, an upstream's broken answer a 502.
    """

    error: type[PeerProtocolError | UpstreamProtocolError]

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self._buf = bytearray()
        self._scan = 0  # where the search for the end of the head resumes (byte-by-byte peers stay linear)
        self._eof = False
        self._dead: PeerProtocolError | UpstreamProtocolError | None = None
        self._path: str | None = None
        # per-message state
        self._head: tuple[str, str, str, Headers] | None = None
        self._body = bytearray()
        self._remaining = 0
        self._mode: Literal["length", "chunked", "close"] = "length"
        self._chunk_state: Literal["size", "data", "data_crlf", "trailers"] = "size"

    def receive_data(self, data: bytes) -> None:
        if data:
            self._buf += data
        else:
            self._eof = True

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def peer_closed(self) -> bool:
        return self._eof

    def _fail(self, message: str, status: int = 400) -> PeerProtocolError | UpstreamProtocolError:
        self._dead = self.error(message, status=status, path=self._path)
        return self._dead

    def _next(self) -> tuple[tuple[str, str, str, Headers], bytes] | _NeedData:
        try:
            return self._step()
        except (PeerProtocolError, UpstreamProtocolError) as exc:
            # the error is kept (`_dead`) and refers to the parser: with its traceback it would keep the frames below
            # alive, a bomb's decoded megabytes included, until the cycle collector happened to run
            raise exc.with_traceback(None) from None

    def _step(self) -> tuple[tuple[str, str, str, Headers], bytes] | _NeedData:
        if self._dead is not None:
            raise self._dead
        if self._head is None:
            end = self._buf.find(b"\r\n\r\n", self._scan)
            if end < 0:
                if len(self._buf) > self.limits.max_header_bytes:
                    raise self._fail("request head too large", 431)
                self._scan = max(0, len(self._buf) - 3)
                if self._eof and self._buf:
                    raise self._fail("connection closed in the middle of the message head")
                return NEED_DATA
            if end > self.limits.max_header_bytes:
                raise self._fail("request head too large", 431)
            head = bytes(self._buf[:end])
            del self._buf[: end + 4]
            self._scan = 0
            self._head = self._parse_head(head)
            self._start_body(self._head[3])
        if not self._read_body():
            if self._eof:
                if self._mode == "close":
                    return self._finish()
                raise self._fail("connection closed in the middle of the body")
            return NEED_DATA
        return self._finish()

    def _finish(self) -> tuple[tuple[str, str, str, Headers], bytes]:
        assert self._head is not None
        head, body = self._head, bytes(self._body)
        self._head, self._body, self._path = None, bytearray(), None
        return head, self._decode_body(body, head[3])

    def _parse_head(self, head: bytes) -> tuple[str, str, str, Headers]:
        lines = head.split(b"\r\n")
        # RFC 9112 2.2: a server SHOULD ignore at least one empty line received before the request line.
        while lines and not lines[0]:
            lines.pop(0)
        if not lines:
            raise self._fail("empty message head")
        try:
            first = lines[0].decode("ascii")
        except UnicodeDecodeError:
            raise self._fail("start line is not ASCII") from None
        parts = first.split(" ", 2)
        if len(parts) != 3:
            raise self._fail(f"malformed start line {first[:80]!r}")
        a, b, c = parts
        self._check_start_line(a, b, c)
        if len(lines) - 1 > self.limits.max_headers:
            raise self._fail("too many headers", 431)
        headers: Headers = {}
        for raw in lines[1:]:
            name, sep, value = raw.partition(b":")
            if not sep or not name or not _TOKEN_CHARS.issuperset(name):
                raise self._fail(f"malformed header line {raw[:80]!r}")
            key = name.decode("ascii").lower()
            text = value.strip(b" \t").decode("latin-1")
            headers[key] = f"{headers[key]}, {text}" if key in headers else text
        return a, b, c, headers

    @abstractmethod
    def _check_start_line(self, a: str, b: str, c: str) -> None:
        """Validate the start line's three fields (request line or status line)."""

    def _start_body(self, headers: Headers) -> None:
        te = headers.get("transfer-encoding")
        cl = headers.get("content-length")
        if te is not None:
            if cl is not None:
                raise self._fail("both Content-Length and Transfer-Encoding")
            if te.strip().lower() != "chunked":
                raise self._fail(f"unsupported Transfer-Encoding {te!r}", 501)
            self._mode, self._chunk_state = "chunked", "size"
        elif cl is not None:
            # ASCII digits only ("²".isdigit() is true) and few of them (int() refuses over 4,300 digits)
            if not (0 < len(cl) <= _MAX_DIGITS and _DIGITS.issuperset(cl)):
                raise self._fail(f"bad Content-Length {cl[:20]!r}")
            self._remaining = int(cl)
            if self._remaining > self.limits.max_body_bytes:
                raise self._fail("body too large", 413)
            self._mode = "length"
        else:
            self._mode, self._remaining = self._default_body_mode()

    def _default_body_mode(self) -> tuple[Literal["length", "close"], int]:
        return "length", 0

    def _read_body(self) -> bool:
        """Move body bytes from the buffer; True once the body is complete."""
        if self._mode == "length":
            take = min(self._remaining, len(self._buf))
            if take:
                self._body += self._buf[:take]
                del self._buf[:take]
                self._remaining -= take
            return self._remaining == 0
        if self._mode == "close":
            self._body += self._buf
            self._buf.clear()
            if len(self._body) > self.limits.max_body_bytes:
                raise self._fail("body too large", 413)
            return False
        return self._read_chunks()

    def _read_chunks(self) -> bool:
        buf = self._buf
        while True:
            if self._chunk_state == "size":
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > 1024:
                        raise self._fail("chunk size line too long")
                    return False
                size_text = bytes(buf[:end]).split(b";", 1)[0].strip(b" \t")
                del buf[: end + 2]
                # hex digits only: int(x, 16) would also take "0x1f", "+1", "1_0" and surrounding whitespace
                if not (0 < len(size_text) <= _MAX_DIGITS and _HEX_DIGITS.issuperset(size_text)):
                    raise self._fail(f"bad chunk size {size_text[:20]!r}")
                size = int(size_text, 16)
                if size == 0:
                    self._chunk_state = "trailers"
                    continue
                if len(self._body) + size > self.limits.max_body_bytes:
                    raise self._fail("body too large", 413)
                self._remaining, self._chunk_state = size, "data"
            elif self._chunk_state == "data":
                take = min(self._remaining, len(buf))
                self._body += buf[:take]
                del buf[:take]
                self._remaining -= take
                if self._remaining:
                    return False
                self._chunk_state = "data_crlf"
            elif self._chunk_state == "data_crlf":
                if len(buf) < 2:
                    return False
                if buf[:2] != b"\r\n":
                    raise self._fail("chunk data not followed by CRLF")
                del buf[:2]
                self._chunk_state = "size"
            else:  # trailers: lines until an empty one; their content is ignored
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > self.limits.max_header_bytes:
                        raise self._fail("trailers too large", 431)
                    return False
                del buf[: end + 2]
                if end == 0:
                    return True

    def _decode_body(self, body: bytes, headers: Headers) -> bytes:
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding in ("identity", ""):
            return body
        if encoding in ("gzip", "x-gzip"):
            return self._inflate(body, 16 + zlib.MAX_WBITS, encoding)
        if encoding == "deflate":
            # RFC 9110 names the zlib format, but some clients send raw deflate: a zlib stream's first two bytes,
            # read as a big-endian number, are a multiple of 31 with method 8 (RFC 1950 2.2); a raw one's rarely are
            wbits = zlib.MAX_WBITS if _is_zlib_header(body) else -zlib.MAX_WBITS
            return self._inflate(body, wbits, encoding)
        raise self._fail(f"unsupported Content-Encoding {encoding!r}", 415)

    def _inflate(self, body: bytes, wbits: int, encoding: str) -> bytes:
        """The decoded body, never more than the body limit held: decoding stops one byte past the limit (413)."""
        limit = self.limits.max_body_bytes
        d = zlib.decompressobj(wbits)
        out = bytearray()
        data = body
        # in steps: one call with max_length=limit still peaks at twice the limit (zlib joins its output blocks)
        while not d.eof:
            try:
                chunk = d.decompress(data, min(_INFLATE_STEP, limit + 1 - len(out)))
            except zlib.error:
                raise self._fail(f"corrupt {encoding} body") from None
            out += chunk
            if len(out) > limit:
                raise self._fail("body too large after decompression", 413)
            data = d.unconsumed_tail
            if not data and not chunk:  # all input read and nothing more came out
                break
        if not d.eof:
            raise self._fail(f"truncated {encoding} body")
        return bytes(out)


def _is_zlib_header(body: bytes) -> bool:
    return len(body) >= 2 and body[0] & 0x0F == 8 and (body[0] << 8 | body[1]) % 31 == 0


class RequestParser(_Reader):
    """Server side: requests on one connection, in order (pipelined requests queue in the buffer)."""

    error = PeerProtocolError

    def _check_start_line(self, method: str, target: str, version: str) -> None:
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            raise self._fail(f"unsupported HTTP version {version[:20]!r}", 505)
        if not method or not _TOKEN_CHARS.issuperset(method.encode()):
            raise self._fail("malformed method")
        if not target.startswith("/") and not target.startswith("http"):
            raise self._fail("malformed request target")
        self._path = target.split("?", 1)[0]

    def next_event(self) -> Request | _NeedData:
        got = self._next()
        if isinstance(got, _NeedData):
            return got
        (method, target, version, headers), body = got
        if target.startswith("http"):  # absolute-form: keep only the path
            target = "/" + target.split("://", 1)[-1].partition("/")[2]
        path, _, query = target.partition("?")
        connection = headers.get("connection", "").lower()
        keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
        return Request(method, target, path, query, headers, body, keep_alive)

    def wants_continue(self) -> bool:
        """True while a complete head asked for ``Expect: 100-continue`` and its body has not started arriving."""
        return (
            self._head is not None
            and self._head[3].get("expect", "").lower() == "100-continue"
            and not self._body
            and not self._buf
        )


class ResponseParser(_Reader):
    """Client side: one response per request sent."""

    error = UpstreamProtocolError

    def _check_start_line(self, version: str, status: str, reason: str) -> None:
        if not version.startswith("HTTP/1.") or not (len(status) == 3 and _DIGITS.issuperset(status)):
            raise self._fail("malformed status line", 502)

    def _default_body_mode(self) -> tuple[Literal["length", "close"], int]:
        return "close", 0

    def next_event(self) -> Response | _NeedData:
        got = self._next()
        if isinstance(got, _NeedData):
            return got
        (version, status, reason, headers), body = got
        connection = headers.get("connection", "").lower()
        keep_alive = self._mode != "close" and "close" not in connection and version == "HTTP/1.1"
        return Response(int(status), reason, headers, body, keep_alive)


_REASONS = {
    100: "Continue",
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
    529: "Overloaded",
}


def encode_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines.extend(f"{k}: {v}" for k, v in headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def encode_response(
    status: int, body: bytes, content_type: str = "application/json", *, keep_alive: bool = True
) -> bytes:
    headers = [("content-type", content_type), ("content-length", str(len(body)))]
    if not keep_alive:
        headers.append(("connection", "close"))
    return encode_head(status, headers) + body


def encode_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b""


LAST_CHUNK: Final = b"0\r\n\r\n"
CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"


def encode_request(method: str, target: str, host: str, body: bytes, headers: list[tuple[str, str]]) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"host: {host}", f"content-length: {len(body)}"]
    lines.extend(f"{k}: {v}" for k, v in headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
