"""lineage: how a session's traces branch from each other, read from the records alone.

A harness on a long task does not hold one growing conversation. It compacts its context when it overflows (a
tool-less call asks the model for a summary, and the conversation goes on from that summary), spawns sub-agents
(a tool call whose argument becomes the first user turn of a new conversation with tools), sends side calls (titles,
routing) and retries. Prefix merging keeps each conversation's calls in one trace and records why a new trace began
(`stats.Split`); this module names what each trace is to the others, so nothing a harness sampled reads as an orphan:

    root          the main conversation's first trace: the first that offers tools (the first trace at all when
                  none does); a title request sent before it is a ``side`` of it
    continuation  the same conversation, cut (edited history, drift under ``strict``, no end-of-turn id)
    retry         the same prompt sent again
    summary       a tool-less call whose answer a later trace's first request carries: the compaction's summary
    compaction    the trace that goes on from that summary (its first request carries the summary's answer)
    subagent      a new conversation with tools whose first request carries a string argument of an earlier tool
                  call (opencode's and Claude Code's ``task``: the prompt the parent gave the sub-agent)
    side          any other new conversation (a title, a router, a memory extraction)

Rule 1 (summary and compaction). Evidence is the traffic, not a harness's wording: a call that offers no tools, whose
answer (at least `MIN_CARRIED` characters) appears in the first request of a later trace. The harnesses' own summary
prompts ("summarize the conversation ...") are evidence of the same thing, not the rule. Both traces get the same
parent: the pre-compaction trace. That is the trace whose conversation the latest context-length refusal before the
summary extended (most messages in common); without a refusal (a harness that compacts before the limit), the trace
whose messages the summary's request shares most, then the last trace with tools active before the summary.

Rule 2 (sub-agent). The parent is the trace holding the latest tool call, sampled before the sub-agent's first call,
one of whose string arguments (at least `MIN_CARRIED` characters) appears in the sub-agent's first request; the
lineage carries that call's id. A sub-agent that itself compacts is the parent of its own summary and compaction.

Rule 3 (the rest). A trace that began with a break (`stats.BREAKS`) is a ``retry`` or a ``continuation`` of the chain
it broke from; a new conversation that is neither summary, compaction nor sub-agent is ``side``, its parent the
closest chain (longest shared prompt), else the trace active just before it.

``at_seq`` is the parent's last call before the branch: the call whose tool call spawned a sub-agent, else the
parent's last call with a lower seq than the child's first.

A compaction cuts its parent's conversation: the parent ends ``truncated`` (if it was ``full``), and the compaction
trace is not counted as a new conversation, so ``merge_rate`` says the session was cut.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import orjson

from polar_cli.capture import CaptureRecord
from polar_cli.trajectory.messages import Message, request_messages
from polar_cli.trajectory.stats import BREAKS, Build, Split
from polar_cli.trajectory.trace import Trace

LineageKind = Literal["root", "continuation", "compaction", "summary", "subagent", "side", "retry"]
LINEAGE_KINDS: tuple[LineageKind, ...] = ("root", "continuation", "compaction", "summary", "subagent", "side", "retry")
# shorter texts ("ok", "done") turn up in unrelated prompts: they are no evidence that one call fed another
MIN_CARRIED = 40


@dataclass(frozen=True, slots=True)
class Lineage:
    """Where a trace branches from: ``parent`` is the index of the parent trace in the session's build (None for the
    root), ``at_seq`` the parent's last call before the branch, ``tool_call_id`` the call that spawned a sub-agent,
    ``evidence`` what in the traffic showed it."""

    kind: LineageKind
    parent: int | None = None
    at_seq: int | None = None
    tool_call_id: str | None = None
    evidence: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def with_lineage(build: Build, records: Sequence[CaptureRecord]) -> Build:
    """``build`` (a `prefix_merging` build) with ``metadata["lineage"]`` on every trace, parents of compactions
    ended truncated, and ``compactions`` / ``subagents`` counted in its stats."""
    if not build.traces:
        return build
    lineages = lineage_of(build.traces, build.stats.splits, records)
    cut = {lin.parent: i for i, lin in enumerate(lineages) if lin.kind == "compaction" and lin.parent is not None}
    traces: list[Trace] = []
    newly_truncated = 0
    for i, (trace, lin) in enumerate(zip(build.traces, lineages, strict=True)):
        meta = {**trace.metadata, "lineage": lin.to_dict()}
        if i in cut and meta.get("end") == "full":
            child = build.traces[cut[i]]
            meta["end"] = "truncated"
            meta["end_reason"] = f"call {min(child.seqs)}: compaction: the conversation went on from a summary"
            newly_truncated += 1
        traces.append(trace.with_metadata(meta))
    kinds = [lin.kind for lin in lineages]
    # a compaction that opened a "new conversation" by the prompt's measure goes on with its parent's conversation
    reopened = sum(
        1 for t, lin in zip(build.traces, lineages, strict=True) if lin.kind == "compaction" and _opened_conversation(t)
    )
    stats = replace(
        build.stats,
        chains_full=build.stats.chains_full - newly_truncated,
        chains_truncated=build.stats.chains_truncated + newly_truncated,
        conversations=build.stats.conversations - reopened,
        compactions=kinds.count("compaction"),
        subagents=kinds.count("subagent"),
    )
    return Build(traces, stats)


def lineage_of(traces: Sequence[Trace], splits: Sequence[Split], records: Sequence[CaptureRecord]) -> list[Lineage]:
    """One `Lineage` per trace (Rules 1-3 of the module docstring)."""
    n = len(traces)
    by_seq = {r.seq: r for r in records}
    firsts = [by_seq[min(t.seqs)] for t in traces]
    split_of = {s.chain: s for s in splits}
    out: list[Lineage | None] = [None] * n
    root = next((i for i, first in enumerate(firsts) if _offers_tools(first)), 0)
    out[root] = Lineage("root")
    for summary, compaction in _compactions(traces, firsts, split_of, root):
        parent, why = _pre_compaction(traces, firsts, records, summary, compaction)
        if parent is None:
            continue
        at = _last_before(traces[parent], min(traces[summary].seqs))
        carried = f"call {min(traces[compaction].seqs)} carries the answer of call {max(traces[summary].seqs)}"
        out[summary] = Lineage("summary", parent, at, evidence=why)
        out[compaction] = Lineage("compaction", parent, at, evidence=carried)
    tool_calls: list[tuple[int, int, str, list[str]]] | None = None
    for i in range(n):
        if out[i] is not None:
            continue
        split = split_of.get(i)
        if split is not None and split.kind in BREAKS and split.closest is not None:
            kind: LineageKind = "retry" if split.kind == "retry" else "continuation"
            first = min(traces[i].seqs)
            out[i] = Lineage(kind, split.closest, _last_before(traces[split.closest], first), evidence=split.kind)
            continue
        if _offers_tools(firsts[i]):
            if tool_calls is None:
                tool_calls = _carried_args(traces, firsts)
            spawn = _spawner(traces, firsts, i, tool_calls)
        else:
            spawn = None
        if spawn is not None:
            parent, seq, call_id = spawn
            out[i] = Lineage("subagent", parent, seq, call_id or None, evidence=f"a tool call of call {seq}")
            continue
        parent = split.closest if split is not None and split.closest is not None else _active_before(traces, i)
        if parent is None or i < root:
            parent = root  # a side call before the main conversation began (a title request): a side of it
        evidence = split.kind if split is not None else None
        out[i] = Lineage("side", parent, _last_before(traces[parent], min(traces[i].seqs)), evidence=evidence)
    return [lin for lin in out if lin is not None]  # the loop above gave every trace one


def _compactions(
    traces: Sequence[Trace], firsts: Sequence[CaptureRecord], split_of: Mapping[int, Split], root: int
) -> list[tuple[int, int]]:
    """(summary trace, compaction trace) pairs: a tool-less trace's answer carried by a later trace's first request
    (Rule 1). Not the root (it has no conversation to cut), and not a trace whose own conversation the later one
    continues (a break from it: the answer is carried because the history is re-sent, as a tool-less harness does)."""
    pairs: list[tuple[int, int]] = []
    taken: set[int] = set()
    texts: dict[int, str] = {}  # each first request rendered once, not once per candidate summary
    starts = [min(t.seqs) for t in traces]
    for s, trace in enumerate(traces):
        if s == root or _offers_tools(firsts[s]):
            continue
        answer = _answer_text(trace)
        if len(answer) < MIN_CARRIED:
            continue
        last = max(trace.seqs)
        for c in range(len(traces)):
            if c in (root, s) or c in taken or starts[c] <= last or _continues(split_of.get(c), s):
                continue
            if c not in texts:
                texts[c] = _request_text(firsts[c])
            if answer in texts[c]:
                pairs.append((s, c))
                taken.add(c)
                break
    return pairs


def _pre_compaction(
    traces: Sequence[Trace], firsts: Sequence[CaptureRecord], records: Sequence[CaptureRecord], summary: int, c: int
) -> tuple[int | None, str]:
    """The trace a compaction cut, and what showed it."""
    start = min(traces[summary].seqs)
    others = [i for i in range(len(traces)) if i not in (summary, c) and min(traces[i].seqs) < start]
    if not others:
        return None, ""
    refused = [r for r in records if r.error_kind == "context_length" and r.seq < start]
    if refused:
        r = max(refused, key=lambda r: r.seq)
        best = _most_shared(traces, others, request_messages(r.normalized))
        if best is not None:
            return best, f"call {r.seq} was refused: context length"
    best = _most_shared(traces, others, request_messages(firsts[summary].normalized))
    if best is not None:
        return best, "the summary's request re-sends this conversation"
    active = _active_before(traces, summary, tools_from=firsts)
    return active, "the conversation active before the summary"


def _most_shared(traces: Sequence[Trace], candidates: Sequence[int], messages: list[Message]) -> int | None:
    """The candidate whose conversation shares the most leading messages with ``messages`` (ties: the later one);
    None when none shares a message past a system prompt."""
    best, best_n = None, 0
    for i in candidates:
        n = _shared_prefix(traces[i].messages, messages)
        if n > best_n or (n == best_n and n > 0 and best is not None and min(traces[i].seqs) > min(traces[best].seqs)):
            best, best_n = i, n
    leading_system = 1 if messages and messages[0].get("role") in ("system", "developer") else 0
    return best if best_n > leading_system else None


def _shared_prefix(a: Sequence[Message], b: Sequence[Message]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if (x.get("role"), x.get("content")) != (y.get("role"), y.get("content")):
            break
        n += 1
    return n


def _spawner(
    traces: Sequence[Trace],
    firsts: Sequence[CaptureRecord],
    child: int,
    tool_calls: Sequence[tuple[int, int, str, list[str]]],
) -> tuple[int, int, str] | None:
    """(parent trace, seq of the call that sampled the tool call, its id) for a sub-agent (Rule 2)."""
    start = min(traces[child].seqs)
    text = _user_text(firsts[child])
    if not text:
        return None
    best: tuple[int, int, str] | None = None
    for i, seq, call_id, args in tool_calls:
        if i == child or seq >= start or (best is not None and seq <= best[1]):
            continue
        if any(arg in text for arg in args):
            best = (i, seq, call_id)
    return best


def _carried_args(traces: Sequence[Trace], firsts: Sequence[CaptureRecord]) -> list[tuple[int, int, str, list[str]]]:
    """(trace, seq, tool call id, its string arguments of at least `MIN_CARRIED` characters) for every sampled tool
    call of the session, in trace order: parsed once per build, however many sub-agents look them up."""
    out = []
    for i, trace in enumerate(traces):
        for seq, call in _sampled_tool_calls(trace, firsts[i]):
            args = [arg for arg in _string_args(call) if len(arg) >= MIN_CARRIED]
            if args:
                out.append((i, seq, str(call.get("id") or ""), args))
    return out


def _sampled_tool_calls(trace: Trace, first: CaptureRecord) -> list[tuple[int, Mapping[str, Any]]]:
    """The tool calls the model sampled in a trace, with the seq of the call that sampled each: the trace's
    assistant messages after its prompt, in the order of the trace's calls."""
    assistants = [m for m in trace.response_messages if m.get("role") == "assistant"]
    seqs = sorted(trace.seqs)
    out: list[tuple[int, Mapping[str, Any]]] = []
    for seq, message in zip(seqs[-len(assistants) :] if assistants else [], assistants, strict=False):
        out.extend((seq, call) for call in message.get("tool_calls") or ())
    return out


def _string_args(call: Mapping[str, Any]) -> list[str]:
    fn = call.get("function")
    raw = fn.get("arguments") if isinstance(fn, Mapping) else None
    try:
        args = orjson.loads(raw) if isinstance(raw, str) else raw
    except orjson.JSONDecodeError:
        return [raw] if isinstance(raw, str) else []
    if not isinstance(args, Mapping):
        return []
    return [v for v in args.values() if isinstance(v, str)]


def _active_before(traces: Sequence[Trace], i: int, *, tools_from: Sequence[CaptureRecord] | None = None) -> int | None:
    """The trace (other than ``i``) with the latest call before trace ``i`` begins (with tools, when asked)."""
    start = min(traces[i].seqs)
    best, best_seq = None, -1
    for j, t in enumerate(traces):
        if j == i or (tools_from is not None and not _offers_tools(tools_from[j])):
            continue
        seq = max((s for s in t.seqs if s < start), default=-1)
        if seq > best_seq:
            best, best_seq = j, seq
    return best


def _continues(split: Split | None, chain: int) -> bool:
    return split is not None and split.kind in BREAKS and split.closest == chain


def _last_before(parent: Trace, seq: int) -> int | None:
    return max((s for s in parent.seqs if s < seq), default=None)


def _offers_tools(record: CaptureRecord) -> bool:
    return bool((record.normalized or {}).get("tools"))


def _opened_conversation(trace: Trace) -> bool:
    return trace.metadata.get("start") in ("session_start", "side_request", "unrelated")


def _answer_text(trace: Trace) -> str:
    last = trace.response_messages[-1] if trace.response_messages else None
    return str((last or {}).get("content") or "").strip()


def _request_text(record: CaptureRecord) -> str:
    return "\n".join(str(m.get("content") or "") for m in request_messages(record.normalized))


def _user_text(record: CaptureRecord) -> str:
    return "\n".join(str(m.get("content") or "") for m in request_messages(record.normalized) if m["role"] == "user")
