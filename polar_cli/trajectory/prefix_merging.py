"""prefix_merging: fold the calls of one conversation into one trace, keeping exactly what the model sampled.

An agent harness re-sends the whole history on every call, so call k+1's prompt is normally call k's prompt, then the
chat template's rendering of call k's answer, the end-of-turn id (E) that closes that assistant turn, then whatever
the harness added (tool results, a user turn, the opening of the next assistant turn). With ``A`` standing for the
ids that open an assistant turn and ``t`` for a tool result:

    call 1  prompt [S U A]                   sampled [x y E]
    call 2  prompt [S U A x y E t A]         sampled [z E]
    merged  prompt [S U A]  response [x y E  t A  z E]  loss_mask [1 1 1  0 0  1 1]

Rule 1 (joining). Calls are taken in ``seq`` order. A call whose prompt equals an open chain's last prompt is a
retry and starts a new chain (Rule 4). Otherwise it joins an open chain when that chain's LAST prompt is a proper
prefix of the call's prompt. Several chains may be open at once (sub-agents and side requests interleave with
the main conversation); if more than one qualifies, the longest last prompt wins, then the chain whose sampled ids
match what this prompt rendered, then the most recently extended chain.

Rule 2 (closing a turn). The interstitial is the tail of the joining call's prompt after the first E found after the
chain's last prompt: that E closes the previous assistant turn. It goes in with loss_mask 0 and logprob 0.0. When the
previous call's sampled ids did not end with E (finish_reason ``length``: cut by max tokens, or a stop string), the
template's E and everything after it are the interstitial: the model never sampled that E.

Rule 3 (sampled ids win). The template's rendering of an answer (between the chain's last prompt and E) may differ
from the sampled ids (retokenization, reasoning re-rendered, tool-call JSON re-serialised). The prefix test is on
prompts only, so such a call still joins; the sampled ids are what is kept, and the call is listed in
``turns_drifted``. A trainer that needs prompt + response to equal the next prompt byte for byte should split there.

Rule 4 (splits). A call that joins no chain starts a new one, and the chain it came closest to (longest common prompt
prefix) is recorded with the reason (`stats.Split`): the identical prompt again (``retry``), a partial prefix
(``prefix_break``: compaction, edited or rewound history, template drift in earlier turns), no E closing the turn
(``no_end_of_turn``), no E known (``eot_unknown``) or no shared prefix at all (``unrelated``). A chain that came closest
to such a call and never grew afterwards ends ``truncated``; all other chains end ``full``.

Rule 5 (end-of-turn id). E is configured, or it is the last sampled id of the first call that stopped normally
(finish_reason ``stop`` or ``tool_calls``) without stop strings in its request.

Failed calls (not ``ok``, or without token ids) are skipped and counted; they neither join nor split chains.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from polar_cli.capture import CaptureRecord
from polar_cli.capture.record import common_prefix_len
from polar_cli.trajectory.messages import conversation
from polar_cli.trajectory.per_request import skip_reason, split_trainable, trace_metadata
from polar_cli.trajectory.stats import Build, MergeStats, Split, SplitKind
from polar_cli.trajectory.trace import Trace

NORMAL_STOPS = frozenset({"stop", "tool_calls"})
# ids of each side shown from the point where a split call's prompt leaves the chain's
_WINDOW = 8


def detect_eot_token_id(records: Iterable[CaptureRecord]) -> int | None:
    """The end-of-turn id: the last sampled id of the first trainable call that stopped normally (Rule 5)."""
    for r in records:
        if (
            r.finish_reason in NORMAL_STOPS
            and skip_reason(r) is None
            and not has_stop_strings(r.normalized)
            and r.response_ids
        ):
            return r.response_ids[-1]
    return None


def has_stop_strings(normalized: Mapping[str, Any] | None) -> bool:
    """A matched stop string ends generation on an ordinary id, so such a call cannot reveal the end-of-turn id."""
    stop = (normalized or {}).get("stop")
    return bool(stop)


@dataclass(slots=True, eq=False)
class _Chain:
    index: int
    first: CaptureRecord
    last: CaptureRecord
    start: str
    seqs: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[list[int]] = field(default_factory=list)
    drifted: list[int] = field(default_factory=list)
    cut: list[int] = field(default_factory=list)
    ended_by: Split | None = None

    def add_sampled(self, r: CaptureRecord) -> None:
        start = len(self.response_ids)
        self.response_ids += r.response_ids
        self.loss_mask += [1] * len(r.response_ids)
        self.logprobs += r.response_logprobs
        self.turns.append([r.seq, start, len(self.response_ids)])
        self.seqs.append(r.seq)
        if r.finish_reason == "length":
            self.cut.append(r.seq)
        self.last = r

    def add_interstitial(self, ids: list[int]) -> None:
        self.response_ids += ids
        self.loss_mask += [0] * len(ids)
        self.logprobs += [0.0] * len(ids)


def prefix_merging(records: Sequence[CaptureRecord], eot_token_id: int | None = None) -> Build:
    """Merge one session's calls into as few traces as the rules in the module docstring allow.

    ``eot_token_id`` None detects it from these records (Rule 5); pass it when merging many sessions of one model.
    """
    calls, skips = split_trainable(records)
    eot = eot_token_id if eot_token_id is not None else detect_eot_token_id(calls)
    chains: list[_Chain] = []
    splits: list[Split] = []
    merged = 0
    for r in calls:
        split: Split | None
        same = [c for c in chains if r.prompt_ids == c.last.prompt_ids]
        candidates = [] if same else [c for c in chains if _extends(r.prompt_ids, c.last.prompt_ids)]
        if same:
            split = _split(r, len(chains), "retry", max(same, key=lambda c: c.last.seq), len(r.prompt_ids))
        elif candidates:
            split = _join(_pick(candidates, r, eot), r, eot, len(chains))
            if split is None:
                merged += 1
                continue
        elif chains:
            split = _closest(chains, r)
        else:
            split = None
        if split is not None:
            splits.append(split)
        chain = _Chain(len(chains), r, r, start=split.kind if split else "session_start")
        chain.add_sampled(r)
        chains.append(chain)

    for s in splits:
        if s.closest is not None:
            c = chains[s.closest]
            if c.ended_by is None and c.last.seq < s.seq:
                c.ended_by = s
    traces = [_trace(c, eot) for c in chains]
    truncated = sum(c.ended_by is not None for c in chains)
    stats = MergeStats(
        chains_total=len(chains),
        chains_full=len(chains) - truncated,
        chains_truncated=truncated,
        completions_total=len(calls),
        completions_merged=merged,
        completions_skipped=len(skips),
        turns_drifted=sum(len(c.drifted) for c in chains),
        splits=tuple(splits),
        skips=tuple(skips),
    )
    return Build(traces, stats)


def _extends(prompt: list[int], last: list[int]) -> bool:
    n = len(last)
    # the two single-id probes reject most other chains without copying a slice
    return len(prompt) > n and prompt[n - 1] == last[-1] and prompt[0] == last[0] and prompt[:n] == last


def _renders_sampled(chain: _Chain, r: CaptureRecord, eot: int | None) -> bool:
    n = len(chain.last.prompt_ids)
    body = _body(chain.last.response_ids, eot)
    return r.prompt_ids[n : n + len(body)] == body


def _body(sampled: list[int], eot: int | None) -> list[int]:
    return sampled[:-1] if eot is not None and sampled and sampled[-1] == eot else sampled


def _pick(candidates: list[_Chain], r: CaptureRecord, eot: int | None) -> _Chain:
    longest = max(len(c.last.prompt_ids) for c in candidates)
    top = [c for c in candidates if len(c.last.prompt_ids) == longest]
    if len(top) > 1:
        top = [c for c in top if _renders_sampled(c, r, eot)] or top
    return max(top, key=lambda c: c.last.seq)


def _join(chain: _Chain, r: CaptureRecord, eot: int | None, new_index: int) -> Split | None:
    """Append call ``r`` to ``chain`` (Rule 2 and 3), or say why it cannot join."""
    prev = chain.last
    n = len(prev.prompt_ids)
    if eot is None:
        return _split(r, new_index, "eot_unknown", chain, n)
    try:
        close = r.prompt_ids.index(eot, n)
    except ValueError:
        return _split(r, new_index, "no_end_of_turn", chain, n)
    sampled = prev.response_ids
    ended = sampled[-1] == eot
    body_len = len(sampled) - 1 if ended else len(sampled)
    if close - n != body_len or r.prompt_ids[n:close] != sampled[:body_len]:
        chain.drifted.append(prev.seq)
    chain.add_interstitial(r.prompt_ids[close + 1 if ended else close :])
    chain.add_sampled(r)
    return None


def _closest(chains: list[_Chain], r: CaptureRecord) -> Split:
    best: _Chain | None = None
    best_len = 0
    for c in chains:
        k = common_prefix_len(r.prompt_ids, c.last.prompt_ids)
        if k > best_len or (best is not None and k == best_len and c.last.seq > best.last.seq):
            best, best_len = c, k
    if best is None:
        return Split(r.session_id, r.seq, len(chains), "unrelated")
    return _split(r, len(chains), "prefix_break", best, best_len)


def _split(r: CaptureRecord, new_index: int, kind: SplitKind, chain: _Chain, at: int) -> Split:
    return Split(
        r.session_id,
        r.seq,
        new_index,
        kind,
        closest=chain.index,
        at=at,
        expected=tuple(chain.last.prompt_ids[at : at + _WINDOW]),
        found=tuple(r.prompt_ids[at : at + _WINDOW]),
    )


def _trace(c: _Chain, eot: int | None) -> Trace:
    prompt_messages, response_messages, tools = conversation(c.first, c.last)
    end_reason = f"call {c.ended_by.seq}: {c.ended_by.reason}" if c.ended_by else None
    return Trace(
        session_id=c.first.session_id,
        seqs=tuple(c.seqs),
        prompt_ids=c.first.prompt_ids,
        response_ids=c.response_ids,
        loss_mask=c.loss_mask,
        response_logprobs=c.logprobs,
        prompt_messages=prompt_messages,
        response_messages=response_messages,
        tools=tools,
        finish_reason=c.last.finish_reason,
        metadata=trace_metadata(
            "prefix_merging",
            c.index,
            eot,
            turns=c.turns,
            start=c.start,
            end="truncated" if c.ended_by else "full",
            end_reason=end_reason,
            drifted=c.drifted,
            cut=c.cut,
        ),
    )
