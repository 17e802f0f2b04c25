"""Sessions, bound to the API key the harness sends: the key a harness is given IS its session key.

A session may also carry sampling parameters of its own (an RL trainer's rollout temperature, a per-sample seed):
they replace the harness's values in every upstream body of the session (`apply_sampling`), but never the fields
the gateway's capture and routing rest on (`PROTECTED_FIELDS`).
"""

from __future__ import annotations

import hashlib
import secrets
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from polar_cli.errors import AuthError
from polar_cli.gateway.continuation import SampledTurn
from polar_cli.gateway.reasoning import ReasoningMemory
from polar_cli.translate.dialects import DIALECTS

# answered calls a session keeps for token-in continuation (sub-agents and side requests interleave with the main one)
TURNS_KEPT = 16

# Upstream body fields a session's sampling may not set: the conversation and its routing, the token-capture fields of
# every dialect, the token-in routes, and what would change the answer's shape (streaming, several choices, echo).
PROTECTED_FIELDS = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "stream",
        "stream_options",
        "rid",
        "input_ids",
        "kv_transfer_params",
        "logprobs",
        "n",
        "echo",
        *(key for d in DIALECTS.values() for key in d.token_fields),
    }
)


@dataclass(slots=True)
class SeqCounter:
    """The seqs of one session id's calls, shared by every key open for that id: seqs never repeat in its file."""

    next: int = 0

    def take(self) -> int:
        seq = self.next
        self.next += 1
        return seq


@dataclass(slots=True)
class Session:
    id: str
    calls: int = 0
    seqs: SeqCounter = field(default_factory=SeqCounter)
    # what the gateway remembers of the session's answers (`reasoning`, `continuation`)
    reasoning: ReasoningMemory = field(default_factory=ReasoningMemory)
    turns: deque[SampledTurn] = field(default_factory=lambda: deque(maxlen=TURNS_KEPT))
    # fields that replace the harness's own in every upstream body of the session (`apply_sampling`)
    sampling: Mapping[str, Any] | None = None
    # False: this session's calls are always rendered by the server, even on a gateway in token-in mode
    token_in: bool = True
    # the most tokens the model may sample over the session's calls, and those sampled so far (`gateway.budget`)
    token_budget: int | None = None
    sampled: int = 0

    def next_seq(self) -> int:
        self.calls += 1
        return self.seqs.take()


class SessionRegistry:
    """Maps session keys to sessions. Unknown keys are refused unless ``allow_unknown`` (then one session per key).

    ``first_seq(session_id)`` says where a session's call numbers start (`capture.store.next_seq`: one past the
    last in its capture file), so a gateway restarted mid-session with the same key goes on numbering instead of
    writing seq 0, 1... again; keys open for one session id share their numbering.
    """

    def __init__(self, *, allow_unknown: bool = False, first_seq: Callable[[str], int] | None = None) -> None:
        self.allow_unknown = allow_unknown
        self.first_seq = first_seq
        self._by_key: dict[str, Session] = {}

    def _new(self, session_id: str, **fields: Any) -> Session:
        shared = next((s.seqs for s in self._by_key.values() if s.id == session_id), None)
        if shared is None:
            shared = SeqCounter(self.first_seq(session_id) if self.first_seq is not None else 0)
        return Session(session_id, seqs=shared, **fields)

    def open(
        self,
        session_id: str,
        key: str | None = None,
        *,
        sampling: Mapping[str, Any] | None = None,
        token_in: bool = True,
        token_budget: int | None = None,
    ) -> str:
        """Register a session and return the key its harness must send as its API key.

        ``sampling`` (``temperature``, ``seed``, ``top_p``, ``max_tokens``, ...) replaces the harness's values in every
        upstream call of the session; a `PROTECTED_FIELDS` key is a ValueError.
        """
        if sampling:
            refused = sorted(set(sampling) & PROTECTED_FIELDS)
            if refused:
                raise ValueError(f"session sampling may not set {', '.join(refused)}: the gateway owns them")
            sampling = dict(sampling)
        key = key or f"sk-polar-{secrets.token_urlsafe(24)}"
        self._by_key[key] = self._new(session_id, sampling=sampling or None, token_in=token_in)
        self._by_key[key].token_budget = token_budget
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
        session = self._by_key[key] = self._new(f"key-{hashlib.sha256(key.encode()).hexdigest()[:16]}")
        return session


def apply_sampling(body: dict[str, Any], sampling: Mapping[str, Any], max_tokens_cap: int | None) -> None:
    """Replace ``body``'s fields with the session's ``sampling`` (checked at `SessionRegistry.open`); a None value
    drops the harness's own (the server's default then applies); ``max_tokens`` stays within the engine's cap."""
    for key, value in sampling.items():
        if key in PROTECTED_FIELDS:  # refused at open; never trust a mapping changed since
            continue
        if key == "max_tokens" and max_tokens_cap is not None and (value is None or value > max_tokens_cap):
            value = max_tokens_cap
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value


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
