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
match what this prompt rendered, then the most recently extended chain. Records read with
`capture.read_session_views` carry their stored delta: a prompt stored as a chain's last prompt plus a suffix shares
that prompt's id buffer, so the prefix test is a pointer comparison; every other pair compares ids.

Rule 2 (closing a turn). The interstitial is the tail of the joining call's prompt after the first E found after the
chain's last prompt: that E closes the previous assistant turn. It goes in with loss_mask 0 and logprob 0.0. When the
previous call's sampled ids did not end with E (finish_reason ``length``: cut by max tokens, or a stop string), the
template's E and everything after it are the interstitial: the model never sampled that E.

Rule 3 (drift). The template's rendering of an answer (the ids between the chain's last prompt and E) may differ
from the sampled ids without their closing E (retokenization, reasoning dropped or re-rendered, tool-call JSON
re-serialised). How much is ``drift_tokens``: strip the longest common prefix of the two, then the longest common
suffix of what is left; the count is the length of the longer of the two middles that remain,
``max(len(sampled), len(rendered)) - prefix - suffix``. It is 0 exactly when the two are equal, 3 for three
substituted ids, 1 for one inserted or dropped id. The prefix test is on prompts only, so such a call qualifies;
then the ``drift`` policy decides:

- ``tolerant`` (the default): it joins. The sampled ids are what is kept, the call is listed in ``turns_drifted``
  and its count added to ``drift_tokens``.
- ``strict``: it does not join. It starts a new chain (split ``drift``) and later calls extend that one, so no
  conversation is dropped, and every trace's prompt + response is exactly its last call's prompt + sampled ids.

Rule 4 (splits). A call that joins no chain starts a new one, and the chain it came closest to (longest common prompt
prefix) is recorded with the reason (`stats.Split`): the identical prompt again (``retry``), no E closing the turn
(``no_end_of_turn``), no E known (``eot_unknown``), a drifted answer under ``strict`` (``drift``), no shared prefix
at all (``unrelated``), only the preamble shared (``side_request``, Rule 5), or more than the preamble but not the
whole last prompt (``prefix_break``: compaction that keeps the first request, edited or rewound history, template
drift in earlier turns). A chain that came closest to a ``retry``, ``prefix_break``, ``no_end_of_turn``,
``eot_unknown`` or ``drift`` call and never grew afterwards ends ``truncated``: its conversation went on elsewhere.
All other chains end ``full``.

Rule 5 (side requests). A conversation's first request is its first prompt up to the E that closes the last message
before the generation prompt (normally the system message and the first user turn). A chain started by a break
(``retry``, ``prefix_break``, ``no_end_of_turn``, ``eot_unknown``, ``drift``) goes on with the conversation of the
chain it broke from, and so with that first request. A call whose common prefix with the closest chain's last prompt
is no longer than the position ``j`` of that E (``prefix <= j``) leaves the conversation inside its first request: a
title or routing request that shares the system prompt, a sub-agent, a conversation restarted with only the system
prompt kept. It opens a new conversation (``side_request``), which is not a break: it never ends the closest chain
truncated. A first prompt that holds no E has no first request to tell, and an unknown E tells none; a shared prefix
there is a ``prefix_break``.

Rule 6 (end-of-turn id). E is configured, or it is the last sampled id of the first call that stopped normally
(finish_reason ``stop`` or ``tool_calls``) without stop strings in its request.

Failed calls (not ``ok``, or without token ids) are skipped and counted; they neither join nor split chains.

Every trace then gets its lineage (`lineage`: root, continuation, retry, compaction, summary, subagent, side), read
from the same records: what the splits above mean for the session as a whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from polar_cli.capture import CaptureRecord, PromptView
from polar_cli.capture.ids import common_prefix_len, id_list
from polar_cli.trajectory.calls import skip_reason, split_trainable, trace_metadata
from polar_cli.trajectory.lineage import with_lineage
from polar_cli.trajectory.messages import conversation
from polar_cli.trajectory.stats import BREAKS, Build, MergeStats, Split, SplitKind
from polar_cli.trajectory.trace import Trace

Drift = Literal["strict", "tolerant"]
DRIFT_POLICIES: tuple[Drift, ...] = ("strict", "tolerant")
NORMAL_STOPS = frozenset({"stop", "tool_calls"})
# chains started by these opened a new conversation: their first call had nothing to join
_NEW_CONVERSATION = frozenset({"session_start", "side_request", "unrelated"})
# ids of each side shown from the point where a split call's prompt leaves the chain's
_WINDOW = 8
# splits whose ``at`` is the whole common prefix of the call's prompt and the closest chain's last prompt
_MEASURED = frozenset({"side_request", "prefix_break"})


def detect_eot_token_id(records: Iterable[CaptureRecord]) -> int | None:
    """The end-of-turn id: the last sampled id of the first trainable call that stopped normally (Rule 6)."""
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


def drift_tokens(sampled: Sequence[int], rendered: Sequence[int]) -> int:
    """How many ids a rendering differs from the sampled ids by (Rule 3); 0 exactly when they are equal."""
    k = common_prefix_len(sampled, rendered)
    a, b = id_list(sampled[k:]), id_list(rendered[k:])
    return max(len(a), len(b)) - common_prefix_len(a[::-1], b[::-1])


@dataclass(slots=True, eq=False)
class _Chain:
    index: int
    first: CaptureRecord
    last: CaptureRecord
    start: str
    prompt: list[int]
    first_request: int | None  # position of the E closing its conversation's first request (Rule 5)
    # (chain, n): this chain's prompts and that earlier chain's agree on exactly their first n ids, however both grow
    anchor: tuple[int, int] | None = None
    seqs: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[list[int]] = field(default_factory=list)
    drifted: list[int] = field(default_factory=list)
    drift_tokens: int = 0
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


def prefix_merging(
    records: Sequence[CaptureRecord], eot_token_id: int | None = None, *, drift: Drift = "tolerant"
) -> Build:
    """Merge one session's calls into as few traces as the rules in the module docstring allow.

    ``eot_token_id`` None detects it from these records (Rule 6); pass it when merging many sessions of one model.
    ``drift`` is the policy for a call whose previous answer the template rendered differently (Rule 3).
    """
    if drift not in DRIFT_POLICIES:
        raise ValueError(f"drift policy {drift!r}: expected one of {', '.join(DRIFT_POLICIES)}")
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
            split = _join(_pick(candidates, r, eot), r, eot, len(chains), strict=drift == "strict")
            if split is None:
                merged += 1
                continue
        elif chains:
            split = _closest(chains, r)
        else:
            split = None
        if split is not None:
            splits.append(split)
        prompt = id_list(r.prompt_ids)
        if split is not None and split.kind in BREAKS and split.closest is not None:
            first_request = chains[split.closest].first_request  # the same conversation: its first request
        else:
            first_request = _last_index(prompt, eot)
        chain = _Chain(len(chains), r, r, split.kind if split else "session_start", prompt, first_request)
        if split is not None and split.kind in _MEASURED and split.closest is not None and split.at is not None:
            closest = chains[split.closest].last.prompt_ids
            if split.at < min(len(prompt), len(closest)):  # they differ at ``at``, so growing changes nothing
                chain.anchor = split.closest, split.at
        chain.add_sampled(r)
        chains.append(chain)

    for s in splits:
        if s.closest is not None and s.kind in BREAKS:
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
        conversations=sum(c.start in _NEW_CONVERSATION for c in chains),
        turns_drifted=sum(len(c.drifted) for c in chains),
        drift_tokens=sum(c.drift_tokens for c in chains),
        splits=tuple(splits),
        skips=tuple(skips),
    )
    return with_lineage(Build(traces, stats), records)


def _extends(prompt: Sequence[int], last: Sequence[int]) -> bool:
    n = len(last)
    if len(prompt) <= n:
        return False
    if isinstance(prompt, PromptView) and prompt.shares_buffer(last):
        return True  # stored as ``last`` plus a suffix: the ids were compared when they were written
    # the two single-id probes reject most other chains without copying a slice
    return prompt[n - 1] == last[-1] and prompt[0] == last[0] and prompt[:n] == last


def _last_index(ids: list[int], value: int | None) -> int | None:
    if value is None or value not in ids:
        return None
    return len(ids) - 1 - ids[::-1].index(value)


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


def _join(chain: _Chain, r: CaptureRecord, eot: int | None, new_index: int, *, strict: bool) -> Split | None:
    """Append call ``r`` to ``chain`` (Rules 2 and 3), or say why it cannot join."""
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
    body = sampled[:-1] if ended else sampled
    rendered = id_list(r.prompt_ids[n:close])
    if rendered != body:
        if strict:
            at = common_prefix_len(body, rendered)
            found = tuple(rendered[at : at + _WINDOW])
            return _split(r, new_index, "drift", chain, n + at, expected=tuple(body[at : at + _WINDOW]), found=found)
        chain.drifted.append(prev.seq)
        chain.drift_tokens += drift_tokens(body, rendered)
    chain.add_interstitial(id_list(r.prompt_ids[close + 1 if ended else close :]))
    chain.add_sampled(r)
    return None


def _closest(chains: list[_Chain], r: CaptureRecord) -> Split:
    best: _Chain | None = None
    best_len = 0
    shared: list[int] = []  # the common prefix of the call's prompt with each chain's last prompt, by index
    for c in chains:
        k = _shared_with(r.prompt_ids, c, shared)
        shared.append(k)
        if k > best_len or (best is not None and k == best_len and c.last.seq > best.last.seq):
            best, best_len = c, k
    if best is None:
        return Split(r.session_id, r.seq, len(chains), "unrelated")
    side = best.first_request is not None and best_len <= best.first_request
    return _split(r, len(chains), "side_request" if side else "prefix_break", best, best_len)


def _shared_with(prompt: Sequence[int], c: _Chain, shared: list[int]) -> int:
    """The common prefix of ``prompt`` and chain ``c``'s last prompt, from what ``prompt`` shares with the chain
    ``c`` is anchored to: a chain split off another shares its first n ids and differs at the next, so a prompt
    that leaves the other chain before n leaves ``c`` there too, one that goes past n leaves ``c`` at n, and only
    one that leaves at n itself is compared, from n on. Many side requests then cost a few ids each, not their
    whole shared system prompt."""
    if c.anchor is None:
        return common_prefix_len(prompt, c.last.prompt_ids)
    other, n = c.anchor
    k = shared[other]
    if k != n:
        return min(k, n)
    return common_prefix_len(prompt, c.last.prompt_ids, n)


def _split(
    r: CaptureRecord,
    new_index: int,
    kind: SplitKind,
    chain: _Chain,
    at: int,
    *,
    expected: tuple[int, ...] | None = None,
    found: tuple[int, ...] | None = None,
) -> Split:
    """A split at prompt position ``at``; ``expected``/``found`` default to the two prompts' ids from there."""
    return Split(
        r.session_id,
        r.seq,
        new_index,
        kind,
        closest=chain.index,
        at=at,
        expected=tuple(chain.last.prompt_ids[at : at + _WINDOW]) if expected is None else expected,
        found=tuple(r.prompt_ids[at : at + _WINDOW]) if found is None else found,
    )


def _trace(c: _Chain, eot: int | None) -> Trace:
    prompt_messages, response_messages, tools = conversation(c.first, c.last)
    end_reason = f"call {c.ended_by.seq}: {c.ended_by.reason}" if c.ended_by else None
    return Trace(
        session_id=c.first.session_id,
        seqs=tuple(c.seqs),
        prompt_ids=c.prompt,
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
            drift_tokens=c.drift_tokens,
            cut=c.cut,
        ),
    )
