"""Which calls a builder may train on, and the trace metadata every builder writes (one schema for a corpus)."""

from __future__ import annotations

from collections.abc import Sequence

from polar_cli.capture import CaptureRecord
from polar_cli.trajectory.stats import Skip


def skip_reason(record: CaptureRecord) -> str | None:
    """Why a call cannot be trained on, or None when it can: only answered calls with their token ids qualify."""
    if record.status != "ok":
        return f"status {record.status}"
    if not record.prompt_ids or not record.response_ids:
        return "no token ids"
    if len(record.response_logprobs) != len(record.response_ids):
        return "logprobs do not match response ids"
    return None


def split_trainable(records: Sequence[CaptureRecord]) -> tuple[list[CaptureRecord], list[Skip]]:
    """The trainable calls in ``seq`` order, and the skipped ones with their reason."""
    keep: list[CaptureRecord] = []
    skips: list[Skip] = []
    for r in sorted(records, key=lambda r: r.seq):
        reason = skip_reason(r)
        if reason is None:
            keep.append(r)
        else:
            skips.append(Skip(r.session_id, r.seq, reason))
    return keep, skips


def trace_metadata(
    strategy: str,
    chain: int,
    eot_token_id: int | None,
    *,
    turns: list[list[int]],
    start: str = "session_start",
    end: str = "full",
    end_reason: str | None = None,
    drifted: list[int] | None = None,
    drift_tokens: int = 0,
    cut: list[int] | None = None,
) -> dict[str, object]:
    """Chain stats of one trace; the same keys for every strategy so a corpus keeps one schema.

    ``turns`` lists ``[seq, start, end]``: where each call's sampled ids sit in ``response_ids``. ``turns_drifted``
    lists the calls whose answer the next prompt rendered differently, ``drift_tokens`` how many ids that drift
    spans in all (`prefix_merging`'s Rule 3).
    """
    return {
        "strategy": strategy,
        "chain": chain,
        "eot_token_id": eot_token_id,
        "start": start,
        "end": end,
        "end_reason": end_reason,
        "turns": turns,
        "turns_drifted": drifted or [],
        "drift_tokens": drift_tokens,
        "turns_cut": cut or [],
    }
