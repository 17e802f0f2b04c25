"""Sessions, bound to the API key the harness sends: the key a harness is given IS its session key."""

from __future__ import annotations

import hashlib
import secrets
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from polar_cli.errors import AuthError
from polar_cli.gateway.continuation import SampledTurn
from polar_cli.gateway.reasoning import ReasoningMemory

# answered calls a session keeps for token-in continuation (sub-agents and side requests interleave with the main one)
TURNS_KEPT = 16


@dataclass(slots=True)
class Session:
    id: str
    calls: int = 0
    # what the gateway remembers of the session's answers (`reasoning`, `continuation`)
    reasoning: ReasoningMemory = field(default_factory=ReasoningMemory)
    turns: deque[SampledTurn] = field(default_factory=lambda: deque(maxlen=TURNS_KEPT))

    def next_seq(self) -> int:
        seq = self.calls
        self.calls += 1
        return seq


class SessionRegistry:
    """Maps session keys to sessions. Unknown keys are refused unless ``allow_unknown`` (then one session per key)."""

    def __init__(self, *, allow_unknown: bool = False) -> None:
        self.allow_unknown = allow_unknown
        self._by_key: dict[str, Session] = {}

    def open(self, session_id: str, key: str | None = None) -> str:
        """Register a session and return the key its harness must send as its API key."""
        key = key or f"sk-polar-{secrets.token_urlsafe(24)}"
        self._by_key[key] = Session(session_id)
        return key

    def close(self, key: str) -> Session | None:
        """Forget a session's key (later calls with it are refused); returns the session it named."""
        return self._by_key.pop(key, None)

    def lookup(self, key: str | None) -> Session:
        if key is None:
            raise AuthError("no API key: send the session key as x-api-key, Authorization: Bearer or x-goog-api-key")
        session = self._by_key.get(key)
        if session is not None:
            return session
        if not self.allow_unknown:
            raise AuthError("unknown session key")
        # the key itself is a secret of the caller's: name the session by a digest, never by the key
        session = self._by_key[key] = Session(f"key-{hashlib.sha256(key.encode()).hexdigest()[:16]}")
        return session


def api_key(headers: Mapping[str, str], query: str) -> str | None:
    """The key in whichever place the harness's API puts it."""
    if key := headers.get("x-api-key"):
        return key
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    if key := headers.get("x-goog-api-key"):
        return key
    if query and "key=" in query:
        values = parse_qs(query).get("key")
        if values:
            return values[0]
    return None


SECRET_HEADERS = frozenset({"authorization", "x-api-key", "x-goog-api-key", "cookie", "proxy-authorization"})


def redact_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: ("[redacted]" if k in SECRET_HEADERS else v) for k, v in headers.items()}


def redact_query(query: str) -> str:
    if "key=" not in query:
        return query
    return "&".join("key=[redacted]" if p.startswith("key=") else p for p in query.split("&"))
