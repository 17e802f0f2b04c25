"""One capture record per model call, and its compact on-disk form.

A session's records are stored one JSON line each, in call order. Each call of an agent session re-sends the whole
history, so storing every record whole would grow quadratically with the session. Instead each line is stored as a
delta against the session's earlier records:

- prompt ids: the longest common prefix with one of the last few calls' prompts (``base`` seq + ``prefix`` length) and
  the ``suffix``. Looking back a few calls, not just one, keeps interleaved sub-agent chains compact. ``line`` names
  the base by its 0-based line in the file, which is unique where seqs may not be (a gateway restarted mid-session
  numbers its calls from its own start; two keys may name one session); readers check that line's seq is ``base``.
  Lines without ``line`` (older writers) name the base by seq alone, and a seq that two recent records carry is
  refused as ambiguous, never guessed.
- the harness's request body and the upstream request: as bytes, the previous call's body with a common prefix and a
  common suffix kept and the ``middle`` replaced (history grows in the middle of a body: tools and settings follow it).
  Byte comparison runs at memcmp speed, so the writer thread holds the GIL for microseconds, not for a deep compare
  of two parsed 100 KB documents (which would stall the event loop's own syscalls behind it).
- headers: ``same`` when equal to the previous call's.
- ``prompt_mode``, ``prompt_note``, ``template_rules`` and ``weight_version``: only when set (lines without them are
  what older writers wrote, and read back as None or empty).

`Compactor` and `Expander` are the two directions; both are pure state machines (no I/O), and
``Expander.expand(Compactor.compact(r)) == r`` for every record in order. Files are written by `store.CaptureWriter`.

An ``Expander(views=True)`` rebuilds prompts as `PromptView`s instead of lists: a prompt stored as its base's first
``prefix`` ids plus a ``suffix`` appends the suffix to the buffer its base already lives in (when the base is the
longest prompt in that buffer, as it is along a growing conversation), so reading a session costs the ids on disk,
not every call's whole prompt, and "the base's prompt is a prefix of this one" is a pointer comparison.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from polar_cli.capture.ids import COMPARE_BLOCK, PromptView, common_prefix_len, id_list
from polar_cli.token_ids import id_bytes

FORMAT_VERSION = 2
# How many earlier calls a prompt may take its prefix from.
PROMPT_LOOKBACK = 4

CaptureStatus = Literal["ok", "upstream_error", "client_error"]
# token_in: the gateway sent the previous prompt's ids plus the new turns' ids; rendered: the server applied the chat
# template to the messages
PromptMode = Literal["token_in", "rendered"]


@dataclass(frozen=True, slots=True)
class CaptureRecord:
    """Everything recorded about one model call (docs/design.md "Capture record").

    ``prompt_ids`` are the exact ids the server fed the model (chat template applied by the server);
    ``response_ids`` the raw sampled ids including the stop token, with one logprob each. Failed calls have empty
    token arrays and an ``error``. ``prompt_mode`` says how the gateway built the prompt (None: records written
    before the gateway said) and ``prompt_note`` why a call was rendered rather than token-in ("first call",
    "history edited at message 3"); ``template_rules`` the template-safety rules that reshaped the history before it
    went upstream (`templates.normalize`). ``weight_version`` is the model weights' version (as the RL trainer named
    it, `gateway.pause`) current when the call was sent upstream; None when none was set or nothing was sent.

    ``prompt_ids`` is a list, except in records read with ``read_session_views``: a `PromptView` there.
    """

    session_id: str
    seq: int
    api: str
    path: str
    started: float
    ended: float
    status: CaptureStatus
    request: Mapping[str, Any]
    request_headers: dict[str, str] = field(default_factory=dict)
    normalized: Mapping[str, Any] | None = None
    response: dict[str, Any] | None = None
    prompt_ids: Sequence[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    finish_reason: str | None = None
    error: str | None = None
    # what kind of error (`errors.PolarError.kind`: ``context_length``, ``timeout``, ``overloaded``, ...); None if none
    error_kind: str | None = None
    prompt_mode: PromptMode | None = None
    prompt_note: str | None = None
    template_rules: tuple[str, ...] = ()
    weight_version: str | None = None
    # The exact bytes of ``request`` / ``normalized`` when the caller has them (the gateway does): the compactor
    # diffs bytes, and serialising the dicts again would cost as much as the diff saves.
    request_bytes: bytes | None = field(default=None, compare=False, repr=False)
    normalized_bytes: bytes | None = field(default=None, compare=False, repr=False)

    @property
    def latency(self) -> float:
        return self.ended - self.started


def common_suffix_len(a: bytes, b: bytes, limit: int) -> int:
    """Longest common suffix of two byte strings, at most ``limit`` long: blocks from the end, then bisection."""
    la, lb = len(a), len(b)
    n = min(limit, la, lb)
    step = COMPARE_BLOCK
    i = 0  # a[la - i:] == b[lb - i:]
    while i < n:
        j = min(n, i + step)
        if a[la - j : la - i] != b[lb - j : lb - i]:
            lo, hi = i, j  # invariant: the last lo bytes match, the last hi do not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if a[la - mid : la - lo] == b[lb - mid : lb - lo]:
                    lo = mid
                else:
                    hi = mid
            return lo
        i = j
        step *= 2
    return n


def _utf8_start(data: bytes, i: int) -> int:
    """``i`` moved back to the start of the UTF-8 character it falls in."""
    while 0 < i < len(data) and data[i] & 0xC0 == 0x80:
        i -= 1
    return i


def _utf8_next(data: bytes, i: int) -> int:
    """``i`` moved forward to the start of the next UTF-8 character (or the end)."""
    while i < len(data) and data[i] & 0xC0 == 0x80:
        i += 1
    return i


def byte_delta(data: bytes, base: bytes) -> dict[str, Any]:
    """``data`` as ``base`` with its middle replaced; prefix and suffix never split a UTF-8 character."""
    prefix = _utf8_start(data, common_prefix_len(data, base))
    suffix = common_suffix_len(data, base, min(len(data), len(base)) - prefix)
    # the shared suffix may only shrink: moving its start back would claim bytes the two bodies do not share
    end = _utf8_next(data, len(data) - suffix)
    return {"prefix": prefix, "suffix": len(data) - end, "middle": data[prefix:end].decode("utf-8")}


Pieces = tuple[bytes | memoryview, ...]
# a body of more pieces than this is joined into one: a copy every few dozen calls, where each call copies (and the
# garbage collector walks) its tuple of pieces
_MAX_PIECES = 64


def _cut(pieces: Pieces, ends: tuple[int, ...], start: int, end: int) -> tuple[Pieces, tuple[int, ...]]:
    """Bytes ``start:end`` of the concatenation of ``pieces`` as views into them, and where each view ends.

    ``ends`` says where each piece ends; nothing is copied. Two bisections and tuple slices, so the cost does not
    grow with the number of pieces the cut keeps whole.
    """
    if start >= end:
        return (), ()
    i = bisect_right(ends, start)  # the piece holding byte ``start``
    j = bisect_left(ends, end, i)  # the piece holding byte ``end - 1``
    i_start = ends[i - 1] if i else 0
    if i == j:
        piece = pieces[i]
        whole = start == i_start and end == ends[i]
        return (piece if whole else memoryview(piece)[start - i_start : end - i_start],), (end - start,)
    head = pieces[i] if start == i_start else memoryview(pieces[i])[start - i_start :]
    tail = pieces[j] if end == ends[j] else memoryview(pieces[j])[: end - ends[j - 1]]
    inner = ends[i:j] if start == 0 else tuple(e - start for e in ends[i:j])
    return (head, *pieces[i + 1 : j], tail), (*inner, end - start)


class JsonBody(Mapping[str, Any]):
    """A JSON object kept as pieces of bytes, joined and parsed on first use.

    Readers hand these out for the request bodies. Each call's body is the previous call's with a middle replaced, so
    a body is kept as views into the earlier bodies' pieces plus its own new middle: reading a session costs what is
    on disk, not the sum of every call's whole history, and only the bodies a reader looks at are ever joined.
    """

    __slots__ = ("_parsed", "_raw", "ends", "length", "pieces")

    def __init__(self, raw: bytes | None = None, *, pieces: Pieces = (), ends: tuple[int, ...] = ()) -> None:
        self._raw = raw
        self.pieces: Pieces = (raw,) if raw is not None else pieces
        self.ends: tuple[int, ...] = (len(raw),) if raw is not None else ends
        self.length = self.ends[-1] if self.ends else 0
        self._parsed: dict[str, Any] | None = None

    @property
    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = b"".join(self.pieces)
        return self._raw

    def replaced(self, stored: dict[str, Any]) -> JsonBody:
        """The body a byte delta (`byte_delta`) against this one describes."""
        prefix, suffix = stored["prefix"], stored["suffix"]
        middle = str(stored["middle"]).encode("utf-8")
        if prefix + suffix > self.length:
            raise ValueError(f"body delta keeps {prefix} + {suffix} bytes of a {self.length}-byte body")
        pieces, ends = _cut(self.pieces, self.ends, 0, prefix)
        mid_end = prefix + len(middle)
        if middle:
            pieces, ends = (*pieces, middle), (*ends, mid_end)
        if suffix:
            tail, tail_ends = _cut(self.pieces, self.ends, self.length - suffix, self.length)
            pieces, ends = pieces + tail, ends + tuple(mid_end + e for e in tail_ends)
        if len(pieces) > _MAX_PIECES:  # bound the fragmentation
            return JsonBody(b"".join(pieces))
        return JsonBody(pieces=pieces, ends=ends)

    def _dict(self) -> dict[str, Any]:
        if self._parsed is None:
            self._parsed = orjson.loads(self.raw)
        return self._parsed

    def __getitem__(self, key: str) -> Any:
        return self._dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __repr__(self) -> str:
        return f"JsonBody({self.length} bytes)"


_EMPTY = JsonBody(b"")


def _body_bytes(obj: Mapping[str, Any] | None, raw: bytes | None) -> bytes | None:
    if obj is None:
        return None
    if raw is not None:
        return raw
    if isinstance(obj, JsonBody):
        return obj.raw
    return orjson.dumps(obj)


def _store_body(data: bytes | None, base: bytes | None) -> dict[str, Any] | None:
    if data is None:
        return None
    if not base:
        return {"prefix": 0, "suffix": 0, "middle": data.decode("utf-8")}
    return byte_delta(data, base)


def _load_body(stored: dict[str, Any] | None, base: JsonBody | None) -> JsonBody | None:
    if stored is None:
        return None
    return (base if base is not None else _EMPTY).replaced(stored)  # not `or`: truthiness would parse the body


def _as_bytes(ids: Sequence[int]) -> bytes:
    """The ids as 4-byte signed ints, what prompts are compared as (an id outside ``[-2**31, 2**31)`` raises).

    Ids in ``[0, 2**31)`` go through `token_ids.id_bytes`, three times faster (no argument parsing per element);
    anything else (a negative id, one at or past 2**31) takes the signed conversion, which keeps or refuses it as it
    always did."""
    ids = id_list(ids)
    data = id_bytes(ids)
    return data if data is not None else array("i", ids).tobytes()


class Compactor:
    """Turns one session's records, in order, into compact line dicts."""

    def __init__(self) -> None:
        # (line, seq, ids) of the last prompts: ``line`` is the record's 0-based line in its file (`compact` counts)
        self._prompts: deque[tuple[int, int, bytes]] = deque(maxlen=PROMPT_LOOKBACK)
        self.lines = 0
        self.last_seq = -1
        self._request: bytes | None = None
        self._normalized: bytes | None = None
        self._headers: dict[str, str] | None = None

    def compact(self, record: CaptureRecord) -> dict[str, Any]:
        prompt = _as_bytes(record.prompt_ids)
        base_line, base_seq, prefix = -1, -1, 0
        for line_no, seq, ids in self._prompts:
            # along a conversation an earlier prompt is the whole start of this one: one memcmp says so, no copies
            n = (len(ids) if prompt.startswith(ids) else common_prefix_len(prompt, ids)) // 4
            if n > prefix:
                base_line, base_seq, prefix = line_no, seq, n
        request = _body_bytes(record.request, record.request_bytes)
        normalized = _body_bytes(record.normalized, record.normalized_bytes)
        same_headers = record.request_headers == self._headers
        line = {
            "v": FORMAT_VERSION,
            "session_id": record.session_id,
            "seq": record.seq,
            "api": record.api,
            "path": record.path,
            "started": record.started,
            "ended": record.ended,
            "status": record.status,
            "request": _store_body(request, self._request),
            "request_headers": "same" if same_headers else record.request_headers,
            "normalized": _store_body(normalized, self._normalized),
            "response": record.response,
            "prompt_ids": {
                "base": base_seq,
                "line": base_line,
                "prefix": prefix,
                "suffix": id_list(record.prompt_ids[prefix:]),
            },
            "response_ids": record.response_ids,
            "response_logprobs": record.response_logprobs,
            "finish_reason": record.finish_reason,
            "error": record.error,
        }
        if record.error_kind is not None:
            line["error_kind"] = record.error_kind
        if record.prompt_mode is not None:
            line["prompt_mode"] = record.prompt_mode
        if record.prompt_note is not None:
            line["prompt_note"] = record.prompt_note
        if record.template_rules:
            line["template_rules"] = list(record.template_rules)
        if record.weight_version is not None:
            line["weight_version"] = record.weight_version
        if record.prompt_ids:
            self._prompts.append((self.lines, record.seq, prompt))
        self.lines += 1
        self.last_seq = max(self.last_seq, record.seq)
        self._request = request if request is not None else self._request
        self._normalized = normalized if normalized is not None else self._normalized
        self._headers = record.request_headers
        return line


class Expander:
    """Rebuilds one session's full records from its compact line dicts, in order.

    ``views`` True rebuilds prompts as `PromptView`s (see the module docstring), False as lists.
    """

    def __init__(self, *, views: bool = False) -> None:
        self.views = views
        # (line, seq, prompt) of the last prompts, as the compactor kept them
        self._recent: deque[tuple[int, int, Sequence[int]]] = deque(maxlen=PROMPT_LOOKBACK)
        self._line = 0
        self._request: JsonBody | None = None
        self._normalized: JsonBody | None = None
        self._headers: dict[str, str] = {}

    def expand(self, line: dict[str, Any]) -> CaptureRecord:
        if line.get("v") != FORMAT_VERSION:
            raise ValueError(f"capture line of unknown format version {line.get('v')!r}")
        prompt_ids = self._prompt(line["prompt_ids"])
        request = _load_body(line["request"], self._request)
        normalized = _load_body(line["normalized"], self._normalized)
        headers = self._headers if line["request_headers"] == "same" else line["request_headers"]
        fields = {k: v for k, v in line.items() if k != "v"}
        if "template_rules" in fields:
            fields["template_rules"] = tuple(fields["template_rules"])
        fields.update(
            prompt_ids=prompt_ids,
            request=request,
            request_headers=headers,
            normalized=normalized,
        )
        record = CaptureRecord(**fields)
        if prompt_ids:
            self._recent.append((self._line, record.seq, prompt_ids))
        self._line += 1
        self._request = request if request is not None else self._request
        self._normalized = normalized if normalized is not None else self._normalized
        self._headers = headers
        return record

    def _base(self, stored: dict[str, Any]) -> Sequence[int]:
        """The prompt a delta names: by its line when the writer said (unique within a file, whatever the seqs), else
        by seq, which is ambiguous once a file holds one seq twice (a gateway restarted with the same key, two keys of
        one session id, as older writers let happen): that is refused, never guessed."""
        base = stored["base"]
        if "line" in stored:
            found = [(seq, ids) for line_no, seq, ids in self._recent if line_no == stored["line"]]
            if not found:
                raise ValueError(f"prompt ids refer to line {stored['line']!r}, not among the last {PROMPT_LOOKBACK}")
            if found[0][0] != base:
                raise ValueError(
                    f"prompt ids refer to line {stored['line']} as call {base!r}; it is call {found[0][0]}"
                )
            return found[0][1]
        candidates = [ids for _, seq, ids in self._recent if seq == base]
        if not candidates:
            raise ValueError(f"prompt ids refer to call {base!r}, not among the last {PROMPT_LOOKBACK}")
        if len(candidates) > 1:
            raise ValueError(
                f"prompt ids refer to call {base!r}, which {len(candidates)} of the last {PROMPT_LOOKBACK} records "
                "carry (a gateway restarted mid-session wrote its seqs again): ambiguous, not rebuilt"
            )
        return candidates[0]

    def _prompt(self, stored: dict[str, Any]) -> Sequence[int]:
        prefix: int = stored["prefix"]
        suffix: list[int] = stored["suffix"]
        if not prefix:
            return PromptView(suffix) if self.views else suffix
        base = self._base(stored)
        if self.views:
            return PromptView.extend(base if isinstance(base, PromptView) else None, prefix, suffix)
        if prefix > len(base):
            raise ValueError(f"prompt prefix {prefix} is longer than its base prompt ({len(base)} ids)")
        return list(base[:prefix]) + suffix
