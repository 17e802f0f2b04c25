"""per_request: one trace per model call, exactly as the server saw and sampled it."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from polar_cli.capture import CaptureRecord
from polar_cli.capture.ids import id_list
from polar_cli.trajectory.calls import skip_reason, split_trainable, trace_metadata
from polar_cli.trajectory.messages import conversation
from polar_cli.trajectory.prefix_merging import prefix_merging
from polar_cli.trajectory.stats import Build, MergeStats
from polar_cli.trajectory.trace import Trace


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
    lineages = per_call_lineage(traces, records)
    traces = [t.with_metadata({**t.metadata, "lineage": lin}) for t, lin in zip(traces, lineages, strict=True)]
    kinds = [lin["kind"] for lin in lineages]
    stats = MergeStats(
        chains_total=n,
        chains_full=n,
        completions_total=n,
        completions_skipped=len(skips),
        compactions=kinds.count("compaction"),
        subagents=kinds.count("subagent"),
        skips=tuple(skips),
    )
    return Build(traces, stats)


def per_call_lineage(traces: Sequence[Trace], records: Sequence[CaptureRecord]) -> list[dict[str, Any]]:
    """Each call's lineage, read off the merged chains of the same records (`lineage`), so both builders tell one
    story: a chain's first call has its chain's lineage (the parent is the call at ``at_seq``), and every later call
    of a chain is a ``continuation`` of the call before it."""
    index = {t.seqs[0]: i for i, t in enumerate(traces)}
    out: list[dict[str, Any]] = [{}] * len(traces)
    for chain in prefix_merging(records).traces:
        lin = chain.metadata["lineage"]
        seqs = sorted(chain.seqs)
        at = lin.get("at_seq")
        out[index[seqs[0]]] = {**lin, "parent": index.get(at) if at is not None else None}
        for before, seq in pairwise(seqs):
            out[index[seq]] = {
                "kind": "continuation",
                "parent": index[before],
                "at_seq": before,
                "tool_call_id": None,
                "evidence": "the next call of the same conversation",
            }
    return out


__all__ = ["per_call_lineage", "per_request", "skip_reason", "split_trainable", "trace_metadata"]
