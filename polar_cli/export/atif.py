"""One session's corpus rows as Harbor's Agent Trajectory Interchange Format (ATIF), a pure function.

A session is one corpus row per trace (segment), each with its ``lineage`` (docs/design.md "Corpus row"). ATIF holds
one linear list of steps per trajectory, sub-agents as embedded trajectories referenced from the parent's steps, and
a step's tokens in its ``metrics``. The mapping (docs/export.md says it with examples):

Rule 1 (main line). The root trace's messages are the document's steps: ``system`` and ``user`` messages are steps
of that source, an ``assistant`` message an ``agent`` step (its ``tool_calls`` with ``arguments`` parsed), and a
``tool`` message a result in the ``observation`` of the agent step that made the call. A child of kind
``continuation``, ``compaction`` or ``retry`` is where the conversation goes on, so its messages follow in the same
trajectory after one ``system`` step that marks the boundary (its ``extra.lineage``). Messages it shares with its
parent (the common prefix) and re-sent answers (``"weight": 0``) are ``is_copied_context``: never trained there.

Rule 2 (tokens). The i-th sampled answer of a trace (an assistant message without ``weight`` 0) is its i-th turn,
``[seq, start, end]`` in ``trace.metadata.turns``; counted from the end when the two differ in number (the
unmatched turns are listed in the trajectory's ``extra``). Its metrics: ``completion_token_ids`` and ``logprobs`` are
``response_ids[start:end]`` and ``response_logprobs[start:end]``; ``prompt_token_ids`` is ``prompt_ids +
response_ids[:start]``, the context the trace holds for that call (optional: it grows with the square of a
session's length); ``llm_call_count`` is 1.

Rule 3 (branches). ``subagent``, ``side`` and ``summary`` traces, and any second main-line child, are trajectories
of their own (built by these same rules, so a sub-agent that compacts holds its own compaction), embedded in the
``subagent_trajectories`` of the trajectory holding their parent, with ``trajectory_id`` ``<session_id>/trace-<i>``.
A sub-agent is referenced from the observation result of the tool call that spawned it (``lineage.tool_call_id``);
a compaction's summaries from the compaction's boundary step, marked as Harbor's own agents mark one
(``extra.context_management = {"type": "compaction", "boundary": "replace"}``); any other branch from a ``system``
step right after the parent's call ``at_seq``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

SCHEMA_VERSION = "ATIF-v1.7"  # the first version with trajectory_id, embedded sub-agents and llm_call_count
MAIN_LINE = ("continuation", "compaction", "retry")
# the fields of a corpus row that belong to its trace, not to the session
SEGMENT_FIELDS = ("trace_index", "trace_count", "lineage", "messages", "tools", "trace")
_BOUNDARY = {
    "continuation": "Continuation: the conversation goes on in a new trace (its history re-sent).",
    "compaction": "Context compaction: the conversation goes on from a summary of the earlier turns.",
    "retry": "Retry: a call's prompt sent again; the conversation goes on from its new answer.",
}

Step = dict[str, Any]


@dataclass(frozen=True, slots=True)
class _Segment:
    index: int
    kind: str
    parent: int | None
    at_seq: int | None
    tool_call_id: str | None
    lineage: Mapping[str, Any] | None
    messages: Sequence[Mapping[str, Any]]
    tools: list[dict[str, Any]]
    trace: Mapping[str, Any]


@dataclass(slots=True)
class _Placed:
    """A trace's steps in the trajectory that holds it, and its sampled steps by call seq."""

    steps: list[Step]
    by_seq: dict[int, Step]


def session_to_atif(rows: Sequence[Mapping[str, Any]], *, prompt_ids: bool = True) -> dict[str, Any] | None:
    """The ATIF trajectory (a JSON-ready dict) of one session's corpus rows; None for a session with no trace.

    ``rows`` are the session's rows in any order, one per trace; a ValueError names what is missing when they are
    not all there. ``prompt_ids`` False leaves each step's ``prompt_token_ids`` out (its count stays).
    """
    segments = _segments(rows)
    if not segments:
        return None
    session = {k: v for k, v in rows[0].items() if k not in SEGMENT_FIELDS}
    children: dict[int | None, list[int]] = {}
    for seg in segments:
        children.setdefault(seg.parent, []).append(seg.index)
    build = _Build(segments, children, session, prompt_ids)
    root = min(children[None]) if None in children else 0
    doc = build.trajectory(root)
    # traces no lineage reaches from the root (a second root, a cycle) still go in, anchored at the end
    for i in range(len(segments)):
        if i not in build.done:
            sub = build.trajectory(i)
            doc["subagent_trajectories"] = [*doc.get("subagent_trajectories", []), sub]
            doc["steps"].append(_branch_step(sub, segments[i]))
            _number(doc["steps"])
            doc["final_metrics"] = _final_metrics(doc["steps"])
    doc["extra"] = {**session, **doc["extra"]}
    doc["notes"] = (
        "Exported by Polar from one session's corpus rows (one per trace); docs/export.md in Polar says how "
        "traces, lineage and token ids map to ATIF."
    )
    return doc


class _Build:
    def __init__(
        self,
        segments: Sequence[_Segment],
        children: Mapping[int | None, list[int]],
        session: Mapping[str, Any],
        prompt_ids: bool,
    ) -> None:
        self.segments = segments
        self.children = children
        self.session = session
        self.prompt_ids = prompt_ids
        self.done: set[int] = set()

    def trajectory(self, head: int) -> dict[str, Any]:
        """The trajectory whose main line starts at trace ``head`` (Rule 1), with its branches embedded (Rule 3)."""
        steps: list[Step] = []
        placed: dict[int, _Placed] = {}
        embedded: list[dict[str, Any]] = []
        unmatched: dict[int, list[int]] = {}
        prev: _Segment | None = None
        seg: _Segment | None = self.segments[head]
        while seg is not None:
            self.done.add(seg.index)
            copied = 0
            if prev is not None:
                boundary = _boundary_step(seg)
                if seg.kind == "compaction":
                    summaries = [self._embed(c, embedded) for c in self._branches(prev.index, "summary")]
                    if summaries:
                        boundary["observation"] = {"results": [{"subagent_trajectory_ref": summaries}]}
                steps.append(boundary)
                copied = _common_prefix(prev.messages, seg.messages)
            own, by_seq, missed = self._segment_steps(seg, copied)
            if missed:
                unmatched[seg.index] = missed
            steps += own
            placed[seg.index] = _Placed(own, by_seq)
            prev, seg = seg, self._main_child(seg.index)
        for index in list(placed):
            for child in self._branches(index, None):
                ref = self._embed(child, embedded)
                self._anchor(steps, placed[index], self.segments[child], ref)
        _number(steps)
        held = list(placed)
        head_seg = self.segments[head]
        agent: dict[str, Any] = {"name": self._agent_name(head_seg), "version": self._version()}
        if self.session.get("model"):
            agent["model_name"] = str(self.session["model"])
        if head_seg.tools:
            agent["tool_definitions"] = head_seg.tools
        extra: dict[str, Any] = {"traces": [_trace_summary(self.segments[i]) for i in held]}
        if unmatched:
            extra["unmatched_turns"] = {str(k): v for k, v in unmatched.items()}
        doc: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "session_id": str(self.session.get("session_id") or ""),
            "trajectory_id": _trajectory_id(self.session, head),
            "agent": agent,
            "steps": steps,
            "final_metrics": _final_metrics(steps),
            "extra": extra,
        }
        if embedded:
            doc["subagent_trajectories"] = sorted(embedded, key=lambda t: t["extra"]["traces"][0]["trace_index"])
        return doc

    def _main_child(self, index: int) -> _Segment | None:
        for c in self.children.get(index, []):
            if c not in self.done and self.segments[c].kind in MAIN_LINE:
                return self.segments[c]
        return None

    def _branches(self, index: int, kind: str | None) -> list[int]:
        return [
            c
            for c in self.children.get(index, [])
            if c not in self.done and (kind is None or self.segments[c].kind == kind)
        ]

    def _embed(self, index: int, embedded: list[dict[str, Any]]) -> dict[str, Any]:
        sub = self.trajectory(index)
        embedded.append(sub)
        seg = self.segments[index]
        return {"trajectory_id": sub["trajectory_id"], "extra": {"kind": seg.kind, "trace_index": index}}

    def _anchor(self, steps: list[Step], parent: _Placed, child: _Segment, ref: dict[str, Any]) -> None:
        """Rule 3: the spawning tool call's result, else a system step after the parent's call ``at_seq``."""
        if child.kind == "subagent" and child.tool_call_id:
            spawner = _step_with_call(parent.steps, child.tool_call_id)
            if spawner is not None:
                results = spawner.setdefault("observation", {"results": []})["results"]
                result = next((r for r in results if r.get("source_call_id") == child.tool_call_id), None)
                if result is None:
                    result = {"source_call_id": child.tool_call_id}
                    results.append(result)
                result.setdefault("subagent_trajectory_ref", []).append(ref)
                return
        after = parent.by_seq.get(child.at_seq) if child.at_seq is not None else None
        if after is None:
            after = parent.steps[-1] if parent.steps else steps[-1]
        at = next(i for i, s in enumerate(steps) if s is after) + 1
        parent_index = after.get("extra", {}).get("trace_index")
        while at < len(steps) and steps[at].get("extra", {}).get("branch_of") == parent_index:
            at += 1  # siblings anchored at the same call stay in trace order
        steps.insert(at, _branch_ref_step(child, ref))

    def _segment_steps(self, seg: _Segment, copied: int) -> tuple[list[Step], dict[int, Step], list[int]]:
        """Rule 1 and Rule 2 for one trace: its steps, its sampled steps by seq, and the seqs of unmatched turns."""
        trace = seg.trace
        turns = [list(t) for t in (trace.get("metadata") or {}).get("turns") or []]
        drifted = set((trace.get("metadata") or {}).get("turns_drifted") or [])
        sampled = [
            i
            for i, m in enumerate(seg.messages)
            if i >= copied and m.get("role") == "assistant" and m.get("weight", 1) != 0
        ]
        k = min(len(sampled), len(turns))
        turn_of = dict(zip(sampled[len(sampled) - k :], turns[len(turns) - k :], strict=True))
        steps: list[Step] = []
        by_seq: dict[int, Step] = {}
        by_call: dict[str, Step] = {}
        for i, m in enumerate(seg.messages):
            role = str(m.get("role") or "")
            extra: dict[str, Any] = {"trace_index": seg.index, "message_index": i}
            if role == "tool":
                call_id = str(m.get("tool_call_id") or "")
                result: dict[str, Any] = {"content": _text(m.get("content"))}
                if m.get("name"):
                    result["extra"] = {"name": m["name"]}
                owner = by_call.get(call_id)
                if owner is not None:
                    owner.setdefault("observation", {"results": []})["results"].append(
                        {"source_call_id": call_id, **result}
                    )
                    continue
                # a result whose call is not in this trace: kept, but no step's tool_calls can claim it
                step: Step = {"source": "system", "message": "", "observation": {"results": [result]}}
                extra["tool_call_id"] = call_id
            elif role == "assistant":
                step = {"source": "agent", "message": _text(m.get("content"))}
                if m.get("reasoning_content"):
                    step["reasoning_content"] = m["reasoning_content"]
                calls = [_tool_call(c) for c in m.get("tool_calls") or []]
                if calls:
                    step["tool_calls"] = calls
                    for c in calls:
                        by_call[c["tool_call_id"]] = step
                turn = turn_of.get(i)
                if turn is not None:
                    seq, start, end = turn
                    step["metrics"] = self._metrics(trace, seq, start, end, seq in drifted)
                    step["llm_call_count"] = 1
                    by_seq[seq] = step
                    extra["seq"] = seq
            else:
                step = {"source": "user" if role == "user" else "system", "message": _text(m.get("content"))}
                if role not in ("user", "system"):
                    extra["role"] = role
            if i < copied or m.get("weight", 1) == 0:
                step["is_copied_context"] = True
            step["extra"] = extra
            steps.append(step)
        missed = [t[0] for t in turns[: len(turns) - k]]
        return steps, by_seq, missed

    def _metrics(self, trace: Mapping[str, Any], seq: int, start: int, end: int, drifted: bool) -> dict[str, Any]:
        prompt = list(trace.get("prompt_ids") or [])
        response = list(trace.get("response_ids") or [])
        logprobs = list(trace.get("response_logprobs") or [])
        metrics: dict[str, Any] = {"prompt_tokens": len(prompt) + start, "completion_tokens": end - start}
        if self.prompt_ids:
            metrics["prompt_token_ids"] = prompt + response[:start]
        metrics["completion_token_ids"] = response[start:end]
        metrics["logprobs"] = logprobs[start:end]
        metrics["extra"] = {"seq": seq, "turns_drifted": True} if drifted else {"seq": seq}
        return metrics

    def _agent_name(self, seg: _Segment) -> str:
        harness = str(self.session.get("harness") or "unknown")
        return harness if seg.kind == "root" else f"{harness}/{seg.kind}"

    def _version(self) -> str:
        return str(self.session.get("harness_version") or "unknown")


def _segments(rows: Sequence[Mapping[str, Any]]) -> list[_Segment]:
    if not rows:
        raise ValueError("no rows")
    ids = {r.get("session_id") for r in rows}
    if len(ids) != 1:
        raise ValueError(f"rows of more than one session: {sorted(map(str, ids))}")
    count = int(rows[0].get("trace_count") or 0)
    if count == 0:
        return []
    ordered = sorted(rows, key=lambda r: int(r.get("trace_index") or 0))
    indices = [int(r.get("trace_index") or 0) for r in ordered]
    if indices != list(range(count)):
        raise ValueError(f"session {ids.pop()}: rows hold traces {indices} of {count}")
    return [_segment(r) for r in ordered]


def _segment(row: Mapping[str, Any]) -> _Segment:
    index = int(row["trace_index"])
    lineage = row.get("lineage")
    lineage = lineage if isinstance(lineage, Mapping) else None
    parent = (lineage or {}).get("parent")
    # an index that points nowhere earlier or later in the session is no parent (the trace is anchored at the end)
    if not isinstance(parent, int) or parent == index or not 0 <= parent < int(row["trace_count"]):
        parent = None
    kind = str((lineage or {}).get("kind") or ("root" if index == 0 else "side"))
    at_seq = (lineage or {}).get("at_seq")
    tools = _json_list(row.get("tools"))
    return _Segment(
        index=index,
        kind=kind,
        parent=parent,
        at_seq=at_seq if isinstance(at_seq, int) else None,
        tool_call_id=(lineage or {}).get("tool_call_id") or None,
        lineage=lineage,
        messages=[m for m in row.get("messages") or [] if isinstance(m, Mapping)],
        tools=[t for t in tools if isinstance(t, dict)],
        trace=row.get("trace") or {},
    )


def _boundary_step(seg: _Segment) -> Step:
    extra: dict[str, Any] = {"trace_index": seg.index, "lineage": seg.lineage}
    if seg.kind == "compaction":
        extra["context_management"] = {"type": "compaction", "boundary": "replace"}
    return {"source": "system", "message": _BOUNDARY.get(seg.kind, _BOUNDARY["continuation"]), "extra": extra}


def _branch_ref_step(seg: _Segment, ref: dict[str, Any]) -> Step:
    where = f" after call {seg.at_seq}" if seg.at_seq is not None else ""
    return {
        "source": "system",
        "message": f"{seg.kind.capitalize()}: trace {seg.index} branched{where}.",
        "observation": {"results": [{"subagent_trajectory_ref": [ref]}]},
        "extra": {"trace_index": seg.index, "branch_of": seg.parent, "lineage": seg.lineage},
    }


def _branch_step(sub: Mapping[str, Any], seg: _Segment) -> Step:
    ref = {"trajectory_id": sub["trajectory_id"], "extra": {"kind": seg.kind, "trace_index": seg.index}}
    return _branch_ref_step(seg, ref)


def _step_with_call(steps: Sequence[Step], call_id: str) -> Step | None:
    """The agent step that sampled ``call_id`` (a re-sent copy only when no sampled one has it)."""
    holders = [s for s in steps if any(c["tool_call_id"] == call_id for c in s.get("tool_calls") or [])]
    sampled = [s for s in holders if not s.get("is_copied_context")]
    found = sampled or holders
    return found[-1] if found else None


def _tool_call(raw: Mapping[str, Any]) -> dict[str, Any]:
    fn = raw.get("function") or {}
    args = fn.get("arguments")
    call: dict[str, Any] = {"tool_call_id": str(raw.get("id") or ""), "function_name": str(fn.get("name") or "")}
    parsed: Any = args
    if isinstance(args, str):
        try:
            parsed = orjson.loads(args) if args.strip() else {}
        except orjson.JSONDecodeError:
            parsed = None
    if isinstance(parsed, dict):
        call["arguments"] = parsed
    else:
        # ATIF wants an object; a freeform tool (Codex's apply_patch) sends text: kept whole in extra
        call["arguments"] = {}
        call["extra"] = {"raw_arguments": args}
    return call


def _final_metrics(steps: Sequence[Step]) -> dict[str, Any]:
    counted = [s["metrics"] for s in steps if "metrics" in s]
    return {
        "total_prompt_tokens": sum(m["prompt_tokens"] for m in counted),
        "total_completion_tokens": sum(m["completion_tokens"] for m in counted),
        "total_steps": len(steps),
        "extra": {"llm_calls": len(counted)},
    }


def _trace_summary(seg: _Segment) -> dict[str, Any]:
    metadata = {k: v for k, v in (seg.trace.get("metadata") or {}).items() if k != "lineage"}
    return {
        "trace_index": seg.index,
        "lineage": seg.lineage,
        "seqs": list(seg.trace.get("seqs") or []),
        "finish_reason": seg.trace.get("finish_reason"),
        "metadata": metadata,
    }


def _trajectory_id(session: Mapping[str, Any], index: int) -> str:
    return f"{session.get('session_id')}/trace-{index}"


def _common_prefix(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if _unweighted(x) != _unweighted(y):
            break
        n += 1
    return n


def _unweighted(m: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in m.items() if k != "weight"}


def _number(steps: list[Step]) -> None:
    for i, s in enumerate(steps):
        s.pop("step_id", None)
        steps[i] = {"step_id": i + 1, **s}


def _text(content: Any) -> str:
    return content if isinstance(content, str) else "" if content is None else str(content)


def _json_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str) and value:
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return []
        return parsed if isinstance(parsed, list) else []
    return []
