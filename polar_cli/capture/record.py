"""One capture record per model call, and its compact on-disk form.

A session's records are stored one JSON line each, in call order. Each call of an agent session re-sends the whole
history, so storing every record whole would grow quadratically with the session. Instead each line is stored as a delta
against the session's earlier records:

- prompt ids: the longest common prefix with one of the last few calls' prompts (``base`` seq + ``prefix`` length) and
  the ``suffix``. Looking back a few calls, not just one, keeps interleaved sub-agent chains compact.
- the harness's request body, its headers and the upstream request: top-level keys equal to the previous call's are
  named in ``same``; lists that extend the previous call's list (the history) are stored as prefix length + tail.

`Compactor` and `Expander` are the two directions; both are pure state machines over dicts (no I/O), and
``Expander.expand(Compactor.compact(r)) == r`` for every record in order. Files are written by `store.CaptureWriter`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Literal

FORMAT_VERSION = 1
# How many earlier calls a prompt may take its prefix from.
PROMPT_LOOKBACK = 4

CaptureStatus = Literal["ok", "upstream_error", "client_error"]


@dataclass(frozen=True, slots=True)
class CaptureRecord:
    """Everything recorded about one model call (DESIGN.md "Capture record").

    ``prompt_ids`` are the exact ids the server fed the model (chat template applied by the server);
    ``response_ids`` the raw sampled ids including the stop token, with one logprob each. Failed calls have empty
    token arrays and an ``error``.
    """

    session_id: str
    seq: int
    api: str
    path: str
    started: float
    ended: float
    status: CaptureStatus
    request: dict[str, Any]
    request_headers: dict[str, str] = field(default_factory=dict)
    normalized: dict[str, Any] | None = None
    response: dict[str, Any] | None = None
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None

    @property
    def latency(self) -> float:
        return self.ended - self.started


def common_prefix_len(a: list[Any], b: list[Any]) -> int:
    """Length of the longest common prefix of two lists, by bisection over C-speed slice comparisons."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _delta(obj: dict[str, Any] | None, base: dict[str, Any] | None) -> dict[str, Any] | None:
    if obj is None:
        return None
    if not base:
        return {"set": obj}
    same: list[str] = []
    extend: dict[str, Any] = {}
    rest: dict[str, Any] = {}
    for key, value in obj.items():
        prev = base.get(key, _MISSING)
        if prev is _MISSING:
            rest[key] = value
        elif value == prev:
            same.append(key)
        elif isinstance(value, list) and isinstance(prev, list) and (n := common_prefix_len(value, prev)) > 0:
            extend[key] = [n, value[n:]]
        else:
            rest[key] = value
    out: dict[str, Any] = {"set": rest}
    if same:
        out["same"] = same
    if extend:
        out["extend"] = extend
    return out


def _undelta(stored: dict[str, Any] | None, base: dict[str, Any] | None) -> dict[str, Any] | None:
    if stored is None:
        return None
    out: dict[str, Any] = {}
    for key in stored.get("same", ()):
        out[key] = base[key]  # type: ignore[index]
    for key, (n, tail) in stored.get("extend", {}).items():
        out[key] = base[key][:n] + tail  # type: ignore[index]
    out.update(stored["set"])
    return out


_MISSING = object()


class Compactor:
    """Turns one session's records, in order, into compact line dicts."""

    def __init__(self) -> None:
        self._prompts: deque[tuple[int, list[int]]] = deque(maxlen=PROMPT_LOOKBACK)
        self._prev: CaptureRecord | None = None

    def compact(self, record: CaptureRecord) -> dict[str, Any]:
        base_seq, prefix = -1, 0
        for seq, ids in self._prompts:
            n = common_prefix_len(record.prompt_ids, ids)
            if n > prefix:
                base_seq, prefix = seq, n
        prev = self._prev
        line = {
            "v": FORMAT_VERSION,
            "session_id": record.session_id,
            "seq": record.seq,
            "api": record.api,
            "path": record.path,
            "started": record.started,
            "ended": record.ended,
            "status": record.status,
            "request": _delta(record.request, prev.request if prev else None),
            "request_headers": _delta(record.request_headers, prev.request_headers if prev else None),
            "normalized": _delta(record.normalized, prev.normalized if prev else None),
            "response": record.response,
            "prompt_ids": {"base": base_seq, "prefix": prefix, "suffix": record.prompt_ids[prefix:]},
            "response_ids": record.response_ids,
            "response_logprobs": record.response_logprobs,
            "finish_reason": record.finish_reason,
            "error": record.error,
        }
        if record.prompt_ids:
            self._prompts.append((record.seq, record.prompt_ids))
        self._prev = record
        return line


class Expander:
    """Rebuilds one session's full records from its compact line dicts, in order."""

    def __init__(self) -> None:
        self._prompts: dict[int, list[int]] = {}
        self._recent: deque[int] = deque(maxlen=PROMPT_LOOKBACK)
        self._prev: CaptureRecord | None = None

    def expand(self, line: dict[str, Any]) -> CaptureRecord:
        if line.get("v") != FORMAT_VERSION:
            raise ValueError(f"capture line of unknown format version {line.get('v')!r}")
        stored = line["prompt_ids"]
        base = self._prompts.get(stored["base"], []) if stored["prefix"] else []
        prompt_ids = base[: stored["prefix"]] + stored["suffix"]
        prev = self._prev
        fields = {k: v for k, v in line.items() if k != "v"}
        fields["prompt_ids"] = prompt_ids
        fields["request"] = _undelta(line["request"], prev.request if prev else None)
        fields["request_headers"] = _undelta(line["request_headers"], prev.request_headers if prev else None)
        fields["normalized"] = _undelta(line["normalized"], prev.normalized if prev else None)
        record = CaptureRecord(**fields)
        if prompt_ids:
            if len(self._recent) == self._recent.maxlen:
                self._prompts.pop(self._recent[0], None)
            self._recent.append(record.seq)
            self._prompts[record.seq] = prompt_ids
        self._prev = record
        return record
