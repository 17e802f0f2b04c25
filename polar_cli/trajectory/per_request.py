"""per_request: one trace per model call, exactly as the server saw and sampled it."""

from __future__ import annotations

from collections.abc import Sequence

from polar_cli.capture import CaptureRecord
from polar_cli.capture.record import id_list
from polar_cli.trajectory.messages import conversation
from polar_cli.trajectory.stats import Build, MergeStats, Skip
from polar_cli.trajectory.trace import Trace


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


def per_request(records: Sequence[CaptureRecord]) -> Build:
    """One trace per trainable call of one session: its prompt, then its sampled ids, all trainable."""
    calls, skips = split_trainable(records)
    traces = []
    for index, r in enumerate(calls):
        prompt_messages, response_messages, tools = conversation(r, r)
        n = len(r.response_ids)
        traces.append(
            Trace(
                session_id=r.session_id,
                seqs=(r.seq,),
                prompt_ids=id_list(r.prompt_ids),
                response_ids=r.response_ids,
                loss_mask=[1] * n,
                response_logprobs=r.response_logprobs,
                prompt_messages=prompt_messages,
                response_messages=response_messages,
                tools=tools,
                finish_reason=r.finish_reason,
                metadata=trace_metadata(
                    "per_request",
                    index,
                    None,
                    turns=[[r.seq, 0, n]],
                    cut=[r.seq] if r.finish_reason == "length" else [],
                ),
            )
        )
    n = len(calls)
    stats = MergeStats(
        chains_total=n, chains_full=n, completions_total=n, completions_skipped=len(skips), skips=tuple(skips)
    )
    return Build(traces, stats)


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
