"""The contract every provider-API module fulfils, and the route the request line picked.

One module per provider API (``anthropic_messages``, ``openai_chat``, ``openai_responses``, ``google_genai``) exports
a ``CODEC``; the API's name is its module's name. The
handler never branches on the API: the registry (`registry.route_for_path`) picks the codec, and the handler calls
only what a `Codec` holds: decode the request, encode the answer (whole, or as a stream in the API's own framing),
encode an error. All of them are pure: dicts and IR in, dicts and bytes out, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from polar_cli.errors import ErrorKind
from polar_cli.translate.ir import ChatRequest, Completion, JsonObject

ApiName = Literal["anthropic_messages", "openai_chat", "openai_responses", "google_genai"]


@dataclass(frozen=True, slots=True)
class Route:
    """What the request line said before the body was read.

    ``model`` and ``stream`` are set only where the API puts them in the path (Google:
    ``/v1beta/models/{model}:streamGenerateContent``); elsewhere the body decides.
    """

    api: ApiName
    model: str | None = None
    stream: bool | None = None
    # whether a streamed answer goes as server-sent events; False only where the API frames it otherwise (Google's
    # streamGenerateContent without ``alt=sse`` answers one JSON array of chunks)
    sse: bool = True


@dataclass(frozen=True, slots=True)
class Stream:
    """A streamed answer as its API frames it: chunks sent in order with chunked transfer encoding."""

    chunks: list[bytes]
    content_type: str = "text/event-stream"


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
    # The streamed answer as one JSON body, for routes that did not ask for server-sent events (``Route.sse``).
    encode_json_stream: Callable[[ChatRequest, Completion], bytes] | None = None

    def stream(self, request: ChatRequest, completion: Completion, route: Route) -> Stream:
        """The streamed answer in the framing ``route`` asked for."""
        if not route.sse and self.encode_json_stream is not None:
            return Stream([self.encode_json_stream(request, completion)], "application/json")
        return Stream(self.encode_stream(request, completion))
