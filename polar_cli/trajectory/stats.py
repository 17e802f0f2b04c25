"""What a build did: how many chains, how many calls merged, and why each split happened."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from polar_cli.trajectory.trace import Trace

SplitKind = Literal["retry", "prefix_break", "no_end_of_turn", "eot_unknown", "drift", "side_request", "unrelated"]

SPLIT_MEANING: dict[str, str] = {
    "retry": "same prompt as an open chain's last call (harness retry)",
    "prefix_break": "shares part of an open chain's conversation, not all of it (compaction, edited history, "
    "template drift in earlier turns)",
    "no_end_of_turn": "extends an open chain's last prompt, but no end-of-turn id closes the assistant turn",
    "eot_unknown": "extends an open chain's last prompt, but no end-of-turn id is known to place the interstitial",
    "drift": "extends an open chain's last prompt, but renders that chain's last answer other than it was sampled "
    "(drift strict)",
    "side_request": "shares only the preamble of an open chain's first request: a new conversation (title or routing "
    "request, sub-agent), not a break",
    "unrelated": "shares no prefix with any open chain: a new conversation",
}
# Splits after which the closest chain's conversation went on elsewhere: that chain ends truncated if it never grows
# again. The other kinds (and the session's first call) open a new conversation.
BREAKS: frozenset[str] = frozenset({"retry", "prefix_break", "no_end_of_turn", "eot_unknown", "drift"})


@dataclass(frozen=True, slots=True)
class Split:
    """A trainable call that started a new chain instead of joining one.

    ``closest`` is the chain (index in its session) whose last prompt shares the longest prefix with this call's
    prompt and ``at`` the length of that shared prefix; ``expected``/``found`` are a few ids of each from ``at`` on,
    enough to show a tokenizer-decoded diff in a report.
    """

    session_id: str
    seq: int
    chain: int
    kind: SplitKind
    closest: int | None = None
    at: int | None = None
    expected: tuple[int, ...] = ()
    found: tuple[int, ...] = ()

    @property
    def where(self) -> str:
        return f" (chain {self.closest}, at id {self.at})" if self.closest is not None else ""

    @property
    def reason(self) -> str:
        return f"{self.kind}: {SPLIT_MEANING[self.kind]}{self.where}"


@dataclass(frozen=True, slots=True)
class Skip:
    """A call left out of every trace, and why."""

    session_id: str
    seq: int
    reason: str


@dataclass(frozen=True, slots=True)
class MergeStats:
    """Counts over one or many sessions.

    ``completions_total`` counts trainable calls, so for prefix merging
    ``completions_total == chains_total + completions_merged``. A chain is truncated when a later call of its session
    came closest to it but could not join for one of the `BREAKS` reasons, and the chain never grew again; every
    other chain is full. ``conversations`` counts the chains that opened a new conversation (a session's first call,
    ``side_request``, ``unrelated``): those calls had nothing to join. ``drift_tokens`` sums the drift of the merged
    turns (``prefix_merging``'s Rule 3). ``compactions`` and ``subagents`` count the traces `lineage` names so: a
    compaction's parent chain ends truncated and the compaction is no new conversation, so a compacted session's
    ``merge_rate`` is below 1.
    """

    chains_total: int = 0
    chains_full: int = 0
    chains_truncated: int = 0
    completions_total: int = 0
    completions_merged: int = 0
    completions_skipped: int = 0
    conversations: int = 0
    turns_drifted: int = 0
    drift_tokens: int = 0
    compactions: int = 0
    subagents: int = 0
    splits: tuple[Split, ...] = ()
    skips: tuple[Skip, ...] = ()
    sessions: int = 1

    @property
    def merge_rate(self) -> float | None:
        """Merged calls over the calls that could have joined a chain; None when none could.

        Every trainable call that did not open a conversation could have joined one, so 1.0 means no conversation was
        cut into two traces. per_request merges nothing: 0.0.
        """
        return merge_rate(self.completions_merged, self.completions_total, self.conversations)

    @classmethod
    def combine(cls, parts: Iterable[MergeStats]) -> MergeStats:
        """Sum per-session stats in one pass (tuple concatenation per session would be quadratic)."""
        counts = Counter[str]()
        splits: list[Split] = []
        skips: list[Skip] = []
        for p in parts:
            counts.update({k: getattr(p, k) for k in COUNTS})
            splits.extend(p.splits)
            skips.extend(p.skips)
        return cls(**{k: counts[k] for k in COUNTS}, splits=tuple(splits), skips=tuple(skips))

    def split_counts(self) -> dict[str, int]:
        """Splits by kind, every kind present (0 where none): one schema for every row, which Parquet needs."""
        counts = Counter(s.kind for s in self.splits)
        return {kind: counts[kind] for kind in get_args(SplitKind)}

    def skip_counts(self) -> dict[str, int]:
        return dict(Counter(s.reason for s in self.skips))

    def counts(self) -> dict[str, Any]:
        """The counts, ``merge_rate`` and splits and skips by kind: small enough for a line per session."""
        out: dict[str, Any] = {k: getattr(self, k) for k in COUNTS}
        out["merge_rate"] = self.merge_rate
        out["split_counts"] = self.split_counts()
        out["skip_counts"] = self.skip_counts()
        return out

    def to_dict(self) -> dict[str, Any]:
        out = self.counts()
        out["splits"] = [{**asdict(s), "reason": s.reason} for s in self.splits]
        out["skips"] = [asdict(s) for s in self.skips]
        return out


def merge_rate(merged: int, total: int, conversations: int) -> float | None:
    """``merged / (total - conversations)``, rounded to 4 places; None when no call could have joined a chain."""
    could = total - conversations
    return round(merged / could, 4) if could > 0 else None


COUNTS = (
    "sessions",
    "chains_total",
    "chains_full",
    "chains_truncated",
    "completions_total",
    "completions_merged",
    "completions_skipped",
    "conversations",
    "turns_drifted",
    "drift_tokens",
    "compactions",
    "subagents",
)


@dataclass(frozen=True, slots=True)
class Build:
    """A builder's output for one session: its traces, in order of their first call, and the stats."""

    traces: list[Trace] = field(default_factory=list)
    stats: MergeStats = field(default_factory=MergeStats)
