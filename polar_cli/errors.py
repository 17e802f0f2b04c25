"""Polar's one error tree: every exception Polar raises on purpose, and what each means to the caller.

    PolarError                      anything Polar raises on purpose
    ├── ConfigError                 bad recipe, flag, manifest or prediction: the CLI exits 2
    ├── RequestError                the caller's request is at fault: answered 4xx in the caller's API shape
    │   ├── AuthError               unknown or missing session key: 401
    │   └── PeerProtocolError       the caller's bytes break HTTP/1.1: 400, 408, 413, 415, 431, 501, 505
    ├── UpstreamError               the inference server is at fault: 502/503/504 (never 429: Codex does not retry it)
    │   ├── ContextLengthError      the prompt does not fit: each API's own context-length error (400)
    │   ├── TokenCaptureError       the answer carries no token ids: the call fails, nothing is recorded silently
    │   └── UpstreamProtocolError   the server's bytes break HTTP/1.1: 502
    ├── RuntimeFailure              the container engine is missing, refused an operation, or cannot build an image
    ├── DiskFull                    a write of the run found no space (ENOSPC, EDQUOT): the run stops, nothing torn
    ├── DirectoryBusy               another process holds the run or state directory's lock (`dirlock`): exit 1
    ├── CaptureReadError            a capture file cannot be read back: corrupt, or of an unknown format
    └── TraceError                  a trace would break its invariants: a builder bug or corrupt capture data

RequestError and UpstreamError are the two kinds of `AnsweredError`: the gateway answers either to the caller, with
the HTTP status and the error kind it carries, whichever side was at fault.

A peer's bad bytes and an upstream's bad bytes are the same parsing failure seen from two sides (h11's local and
remote faults): the sans-IO parser in `wire.http11` raises the one its side names (`RequestParser` the peer's,
`ResponseParser` the upstream's), so no boundary has to guess who is to blame.

Foreign exceptions (OSError, orjson.JSONDecodeError, docker.errors.APIError, asyncio.TimeoutError, ...) are mapped
to these once each, at the boundary where they enter Polar, with ``raise ... from exc``. The CLI maps the tree to
exit codes in one place (`commands.common.exit_codes`): ConfigError 2, any other PolarError 1, Ctrl-C 130.
"""

from __future__ import annotations

from typing import Literal

ErrorKind = Literal[
    "invalid_request",
    "authentication",
    "not_found",
    "method_not_allowed",
    "payload_too_large",
    "unsupported_media_type",
    "context_length",
    "upstream",
    "overloaded",
    "timeout",
]


class PolarError(Exception):
    """Base of every error Polar raises on purpose."""


class ConfigError(PolarError):
    """A recipe, flag or manifest is wrong; the message names the field."""


class AnsweredError(PolarError):
    """An error the gateway answers the caller with, whichever side is at fault.

    ``status`` is the HTTP status to answer with; ``kind`` selects the error type in the caller's API shape. Each kind
    of answered error sets its usual pair as class attributes, so raising one takes only the message; a raiser that
    knows better passes its own.
    """

    status: int = 500
    kind: ErrorKind = "upstream"

    def __init__(self, message: str, *, status: int | None = None, kind: ErrorKind | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = self.status if status is None else status
        self.kind = self.kind if kind is None else kind


class RequestError(AnsweredError):
    """The caller's request is malformed or unsupported."""

    status = 400
    kind: ErrorKind = "invalid_request"


class AuthError(RequestError):
    """Unknown or missing session key."""

    status = 401
    kind: ErrorKind = "authentication"


def _protocol_kind(status: int) -> ErrorKind:
    return {413: "payload_too_large", 415: "unsupported_media_type"}.get(status, "invalid_request")  # type: ignore[return-value]


class PeerProtocolError(RequestError):
    """The caller broke HTTP/1.1. ``path`` is set once the request line was read: the error takes that API's shape."""

    def __init__(self, message: str, *, status: int = 400, path: str | None = None) -> None:
        super().__init__(message, status=status, kind=_protocol_kind(status))
        self.path = path


class UpstreamError(AnsweredError):
    """The inference server refused, failed or timed out."""

    status = 502


class ContextLengthError(UpstreamError):
    """The prompt does not fit the model's context: each API answers it with its own context-length error."""

    status = 400
    kind: ErrorKind = "context_length"


class TokenCaptureError(UpstreamError):
    """The answer carries no token ids: the call fails rather than be recorded without them."""


class UpstreamProtocolError(UpstreamError):
    """The inference server broke HTTP/1.1: whatever status its bytes would have meant, the caller sees a 502."""

    def __init__(self, message: str, *, status: int = 502, path: str | None = None) -> None:
        del status  # the parser's status describes the bytes; to the caller an upstream's bad bytes are a 502
        super().__init__(f"upstream broke HTTP/1.1: {message}", status=502, kind="upstream")
        self.path = path


class RuntimeFailure(PolarError):
    """The container engine is missing, refused an operation, or an image cannot be built."""


class DiskFull(PolarError):
    """A write of the run directory or the capture found no space left: what was being written was cut back off, so
    no file holds half a line; the run stops, and the same command resumes once there is space."""

    def __init__(self, path: object, exc: OSError) -> None:
        super().__init__(f"disk full: writing {path} failed ({exc.strerror or exc}); free space and run again")


class DirectoryBusy(PolarError):
    """Another process holds the lock of a run directory (`polar generate`) or state directory (`polar serve`)."""


def is_disk_full(exc: BaseException) -> bool:
    import errno

    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


class CaptureReadError(PolarError):
    """A session file could not be read back: corrupt or from an unknown capture format."""


class TraceError(PolarError):
    """A trace would break its invariants: a builder bug or corrupt capture data, never something to train on."""
