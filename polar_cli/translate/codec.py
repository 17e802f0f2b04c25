"""The contract every provider-API module fulfils, and the route the path picked.

One module per provider API (``anthropic_messages``, ``openai_chat``, ``openai_responses``, ``google_genai``) exports
a ``CODEC``. The server never branches on the API: `registry.detect` picks the codec, and the handler only calls
these four functions. All of them are pure: dicts and IR in, dicts and bytes out, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from polar_cli.errors import ErrorKind
from polar_cli.translate.ir import ChatRequest, Completion, JsonObject

ApiName = Literal["anthropic", "openai_chat", "openai_responses", "google"]


@dataclass(frozen=True, slots=True)
class Route:
    """What the request line said before the body was read.

    ``model`` and ``stream`` are set only where the API puts them in the path (Google:
    ``/v1beta/models/{model}:streamGenerateContent``); elsewhere the body decides.
    """

    api: ApiName
    model: str | None = None
    stream: bool | None = None


@dataclass(frozen=True, slots=True)
class Codec:
    name: ApiName
    # Raises RequestError (with a message naming the offending field) for anything malformed or unsupported.
    decode_request: Callable[[JsonObject, Route], ChatRequest]
    # The non-streaming answer body.
    encode_response: Callable[[ChatRequest, Completion], dict[str, Any]]
    # The synthetic stream of the final answer: complete SSE frames, in order, ending with the API's terminator.
    encode_stream: Callable[[ChatRequest, Completion], list[bytes]]
    # The error body for an HTTP status, an error kind and a message, in this API's error shape.
    encode_error: Callable[[int, ErrorKind, str], dict[str, Any]]
    # Prefix of the tool-call ids the gateway mints for this API (``toolu_`` for Anthropic, ``call_`` for OpenAI).
    tool_call_id_prefix: str = "call_"
    # For APIs whose clients only understand some errors inside a 200 event stream (Codex reads a context overflow
    # only as ``response.failed``): (request, completion id, created, kind, message) -> SSE frames.
    encode_stream_error: Callable[[ChatRequest, str, int, ErrorKind, str], list[bytes]] | None = None
    # The error kinds that go through encode_stream_error when the caller asked to stream.
    stream_error_kinds: frozenset[ErrorKind] = frozenset()
