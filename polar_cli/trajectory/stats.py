"""What a build did: how many chains, how many calls merged, and why each split happened."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from polar_cli.trajectory.trace import Trace

SplitKind = Literal["retry", "prefix_break", "no_end_of_turn", "eot_unknown", "unrelated"]

SPLIT_MEANING: dict[str, str] = {
    "retry": "same prompt as an open chain's last call (harness retry)",
    "prefix_break": "shares only part of an open chain's last prompt (compaction, edited history, template drift)",
    "no_end_of_turn": "extends an open chain's last prompt, but no end-of-turn id closes the assistant turn",
    "eot_unknown": "extends an open chain's last prompt, but no end-of-turn id is known to place the interstitial",
    "unrelated": "shares no prefix with any open chain (a new conversation, e.g. a side request)",
}


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
    came closest to it but could not join (see `Split`) and the chain never grew again; every other chain is full.
    """

    chains_total: int = 0
    chains_full: int = 0
    chains_truncated: int = 0
    completions_total: int = 0
    completions_merged: int = 0
    completions_skipped: int = 0
    turns_drifted: int = 0
    splits: tuple[Split, ...] = ()
    skips: tuple[Skip, ...] = ()
    sessions: int = 1

    @classmethod
    def combine(cls, parts: Iterable[MergeStats]) -> MergeStats:
        """Sum per-session stats in one pass (tuple concatenation per session would be quadratic)."""
        counts = Counter[str]()
        splits: list[Split] = []
        skips: list[Skip] = []
        for p in parts:
            counts.update({k: getattr(p, k) for k in _COUNTS})
            splits.extend(p.splits)
            skips.extend(p.skips)
        return cls(**{k: counts[k] for k in _COUNTS}, splits=tuple(splits), skips=tuple(skips))

    def split_counts(self) -> dict[str, int]:
        return dict(Counter(s.kind for s in self.splits))

    def skip_counts(self) -> dict[str, int]:
        return dict(Counter(s.reason for s in self.skips))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in _COUNTS}
        out["split_counts"] = self.split_counts()
        out["skip_counts"] = self.skip_counts()
        out["splits"] = [{**asdict(s), "reason": s.reason} for s in self.splits]
        out["skips"] = [asdict(s) for s in self.skips]
        return out


_COUNTS = (
    "sessions",
    "chains_total",
    "chains_full",
    "chains_truncated",
    "completions_total",
    "completions_merged",
    "completions_skipped",
    "turns_drifted",
)


@dataclass(frozen=True, slots=True)
class Build:
    """A builder's output for one session: its traces, in order of their first call, and the stats."""

    traces: list[Trace] = field(default_factory=list)
    stats: MergeStats = field(default_factory=MergeStats)
