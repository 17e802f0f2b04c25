"""Polar's one error tree.

    PolarError                      anything Polar raises on purpose
    ├── ConfigError                 bad recipe, flag or manifest: the CLI exits 2
    ├── RequestError                the caller's request is at fault: answered 4xx in the caller's API shape
    │   └── AuthError               unknown or missing session key: 401
    └── UpstreamError               the inference server is at fault: 502/503/504 (never 429, Codex does not retry it)
        ├── ContextLengthError      the prompt does not fit: each API's own context-length error (400)
        └── TokenCaptureError       the answer carries no token ids: the call fails loudly, nothing is recorded silently

Foreign exceptions (OSError, orjson.JSONDecodeError, asyncio.TimeoutError, ...) are mapped to these in one place each,
at the boundary where they enter Polar, with ``raise ... from exc``.
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


class RequestError(PolarError):
    """The caller's request is malformed or unsupported.

    ``status`` is the HTTP status to answer with; ``kind`` selects the error type in the caller's API shape.
    """

    def __init__(self, message: str, *, status: int = 400, kind: ErrorKind = "invalid_request") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind: ErrorKind = kind


class AuthError(RequestError):
    def __init__(self, message: str) -> None:
        super().__init__(message, status=401, kind="authentication")


class UpstreamError(PolarError):
    """The inference server refused, failed or timed out."""

    def __init__(self, message: str, *, status: int = 502, kind: ErrorKind = "upstream") -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.kind: ErrorKind = kind


class ContextLengthError(UpstreamError):
    def __init__(self, message: str) -> None:
        super().__init__(message, status=400, kind="context_length")


class TokenCaptureError(UpstreamError):
    def __init__(self, message: str) -> None:
        super().__init__(message, status=502, kind="upstream")
