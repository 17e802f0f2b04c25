"""Server-sent events encoding (https://html.spec.whatwg.org/multipage/server-sent-events.html)."""

from __future__ import annotations

from typing import Any

import orjson


def sse_event(data: Any, event: str | None = None) -> bytes:
    """One SSE frame: an optional ``event:`` line, one ``data:`` line of compact JSON, and the blank line.

    orjson never emits a raw newline inside a JSON document, so one ``data:`` line always suffices.
    """
    payload = orjson.dumps(data)
    if event is None:
        return b"data: " + payload + b"\n\n"
    return b"event: " + event.encode() + b"\ndata: " + payload + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"
