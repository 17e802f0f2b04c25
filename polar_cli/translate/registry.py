"""Which provider API a request speaks: by path first, then headers, then body.

Harnesses are pointed at base URLs with or without ``/v1`` (Claude Code appends ``/v1/messages`` to a bare host,
Codex appends ``/responses`` to whatever it is given), so paths are matched by their tail.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from polar_cli.translate import anthropic_messages, google_genai, openai_chat, openai_responses
from polar_cli.translate.codec import ApiName, Codec, Route

CODECS: dict[ApiName, Codec] = {
    "anthropic_messages": anthropic_messages.CODEC,
    "openai_chat": openai_chat.CODEC,
    "openai_responses": openai_responses.CODEC,
    "google_genai": google_genai.CODEC,
}

_GOOGLE = re.compile(r"/models/(?P<model>[^/:]+):(?P<verb>generateContent|streamGenerateContent)$")
_TAILS: tuple[tuple[str, ApiName], ...] = (
    ("/messages", "anthropic_messages"),
    ("/chat/completions", "openai_chat"),
    ("/responses", "openai_responses"),
)


def route_for_path(path: str, query: str = "") -> Route | None:
    """The route a model-call path (and its query) names, or None when the path is not a model call."""
    path = path.rstrip("/")
    for tail, api in _TAILS:
        if path.endswith(tail):
            return Route(api)
    m = _GOOGLE.search(path)
    if m:
        stream = m["verb"] == "streamGenerateContent"
        return Route("google_genai", model=m["model"], stream=stream, sse="alt=sse" in query.split("&"))
    return None


# Endpoints of the providers' APIs that are not model calls: never guessed into one (they answer 404).
_OTHER_ENDPOINTS = (
    "/models", "/embeddings", "/count_tokens", "/completions", "/tokenize", "/files", "/batches", "/moderations",
)  # fmt: skip


def route_for_unknown_path(path: str, headers: Mapping[str, str], body: Mapping[str, Any]) -> Route | None:
    """A POST to an unrecognised path (a client given the full endpoint as its base URL, say): guess from the
    provider's own headers, then from the body's keys."""
    if path.rstrip("/").endswith(_OTHER_ENDPOINTS):
        return None
    if "anthropic-version" in headers or "x-api-key" in headers:
        return Route("anthropic_messages")
    if "x-goog-api-key" in headers:
        return None  # Google puts the model in the path; without it the call cannot be served
    if "contents" in body:
        return None
    if "input" in body and "messages" not in body:
        return Route("openai_responses")
    if "messages" in body:
        return Route(
            "anthropic_messages" if "max_tokens" in body and isinstance(body.get("system"), list) else "openai_chat"
        )
    return None


def error_codec_for_path(path: str) -> Codec:
    """The codec whose error shape best fits a path, for errors raised before the body could be read."""
    route = route_for_path(path)
    if route is not None:
        return CODECS[route.api]
    if "/v1beta/" in path or ":generateContent" in path or ":streamGenerateContent" in path:
        return CODECS["google_genai"]
    if path.rstrip("/").endswith("/messages/count_tokens"):
        return CODECS["anthropic_messages"]
    return CODECS["openai_chat"]
