"""Corpus rows of one session, one per trace, in the shape `polar generate` writes (docs/design.md "Corpus row").

The session: an opencode-like root that spawns a sub-agent through its ``task`` tool, overflows, compacts (a
tool-less summary call, then a trace that goes on from the summary) and finishes. ``subagent_compacts`` makes the
sub-agent overflow and compact too. Token ids are made up but distinct, so a wrong slice cannot pass for a right one.
"""

from __future__ import annotations

from typing import Any

import orjson

EOT = 2
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("bash", "task")]
SUB_TOOLS = [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}]
TASK = "Fix the date parsing bug in utils: parse_date('2024-02-30') should raise ValueError."
SPAWN_PROMPT = "Find where parse_date is defined and list every caller of it in the repository."
SUB_ANSWER = "parse_date is defined in utils/dates.py and called from cli.py and api.py."
SUMMARY = "Summary: parse_date lives in utils/dates.py; callers are cli.py and api.py; the fix is half written."
SUB_SUMMARY = "Summary: grep found parse_date in utils/dates.py; callers not yet listed."


def msg(role: str, content: str = "", *, calls: list[tuple[str, str, Any]] = (), call_id: str | None = None,
        weight: int | None = None) -> dict[str, Any]:  # fmt: skip
    m: dict[str, Any] = {
        "role": role,
        "content": content,
        "reasoning_content": None,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a if isinstance(a, str) else
             orjson.dumps(a).decode()}}
            for i, n, a in calls
        ],
        "tool_call_id": call_id,
        "name": None,
    }  # fmt: skip
    if weight is not None:
        m["weight"] = weight
    return m


def trace(index: int, prompt_len: int, calls: list[int], lineage: dict[str, Any] | None) -> dict[str, Any]:
    """A trace of the calls ``calls`` (seqs): each samples 3 ids and the end-of-turn id, and between two calls the
    harness adds 5 interstitial ids (a tool result)."""
    prompt_ids = [10_000 * (index + 1) + j for j in range(prompt_len)]
    response_ids: list[int] = []
    loss_mask: list[int] = []
    logprobs: list[float] = []
    turns = []
    for n, seq in enumerate(calls):
        if n:
            inter = [20_000 + 100 * seq + j for j in range(5)]
            response_ids += inter
            loss_mask += [0] * 5
            logprobs += [0.0] * 5
        start = len(response_ids)
        sampled = [1_000 + 10 * seq + j for j in range(3)] + [EOT]
        response_ids += sampled
        loss_mask += [1] * 4
        logprobs += [-(seq + 1) / 10 - j / 100 for j in range(4)]
        turns.append([seq, start, len(response_ids)])
    return {
        "seqs": calls,
        "prompt_ids": prompt_ids,
        "response_ids": response_ids,
        "loss_mask": loss_mask,
        "response_logprobs": logprobs,
        "finish_reason": "stop",
        "metadata": {"strategy": "prefix_merging", "turns": turns, "turns_drifted": [], "lineage": lineage},
    }


def lineage(kind: str, parent: int | None = None, at_seq: int | None = None, call: str | None = None) -> dict:
    return {"kind": kind, "parent": parent, "at_seq": at_seq, "tool_call_id": call}


def session_rows(*, subagent_compacts: bool = False, session_id: str = "sess-1") -> list[dict[str, Any]]:
    system = msg("system", "You are opencode, a coding agent.")
    task = msg("user", TASK)
    a_c1 = msg("assistant", "Let me look around.", calls=[("c1", "bash", {"command": "ls"})])
    t_c1 = msg("tool", "cli.py api.py utils/", call_id="c1")
    a_c2 = msg("assistant", "", calls=[("c2", "task", {"prompt": SPAWN_PROMPT})])
    t_c2 = msg("tool", SUB_ANSWER, call_id="c2")
    a_c3 = msg("assistant", "Editing.", calls=[("c3", "bash", {"command": "sed -i ... utils/dates.py"})])
    t_c3 = msg("tool", "ok", call_id="c3")
    resent = [system, task, {**a_c1, "weight": 0}, t_c1, {**a_c2, "weight": 0}, t_c2, {**a_c3, "weight": 0}, t_c3]

    sub_system = msg("system", "You are a search sub-agent.")
    sub_user = msg("user", SPAWN_PROMPT)
    a_s1 = msg("assistant", "", calls=[("s1", "grep", {"pattern": "def parse_date"})])
    t_s1 = msg("tool", "utils/dates.py:12:def parse_date(s):", call_id="s1")

    # (lineage, messages, tools, seqs, prompt length), in the order of their first calls
    segments: list[tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], list[int], int]] = []
    if not subagent_compacts:
        root_seqs, overflow_at, summary_seq, compaction_seqs = [0, 1, 4], 4, 6, [7, 8]
        subagent = [(lineage("subagent", 0, 1, "c2"), [sub_system, sub_user, a_s1, t_s1, msg("assistant", SUB_ANSWER)],
                     SUB_TOOLS, [2, 3], 20)]  # fmt: skip
    else:
        # the sub-agent overflows after its first call (seq 2): its summary is seq 3, it answers from it at seq 4
        root_seqs, overflow_at, summary_seq, compaction_seqs = [0, 1, 5], 5, 7, [8, 9]
        sub_resent = [sub_system, sub_user, {**a_s1, "weight": 0}, t_s1]
        subagent = [
            (lineage("subagent", 0, 1, "c2"), [sub_system, sub_user, a_s1], SUB_TOOLS, [2], 20),
            (lineage("summary", 1, 2), [*sub_resent, msg("user", "Summarize."), msg("assistant", SUB_SUMMARY)], [],
             [3], 30),
            (lineage("compaction", 1, 2), [sub_system, sub_user, msg("user", SUB_SUMMARY), msg("assistant",
             SUB_ANSWER)], SUB_TOOLS, [4], 25),
        ]  # fmt: skip
    root = len(segments)
    segments.append((lineage("root"), [system, task, a_c1, t_c1, a_c2, t_c2, a_c3], TOOLS, root_seqs, 40))
    segments += subagent
    summarize = msg("user", "Summarize the conversation so far.")
    segments.append(
        (lineage("summary", root, overflow_at), [*resent, summarize, msg("assistant", SUMMARY)], [], [summary_seq], 90)
    )
    after = [
        system,
        task,
        msg("user", SUMMARY),
        msg("assistant", "", calls=[("c4", "bash", {"command": "pytest -q"})]),
        msg("tool", "3 passed", call_id="c4"),
        msg("assistant", "Done: parse_date now raises ValueError."),
    ]
    segments.append((lineage("compaction", root, overflow_at), after, TOOLS, compaction_seqs, 50))
    session = {
        "key": f"inst-1::opencode::{session_id}",
        "session_id": session_id,
        "instance_id": "inst-1",
        "repo": "acme/dates",
        "harness": "opencode",
        "model": "qwen3-tiny",
        "attempt": 0,
        "status": "resolved",
        "reward": 1.0,
        "accepted": True,
        "reason": None,
        "patch": "diff --git a/utils/dates.py b/utils/dates.py\n",
        "eval": {"resolved": True},
        "exit_code": 0,
        "timing": {"total": 12.5},
        "stats": {"compactions": 1, "subagents": 1},
    }
    rows = []
    for i, (lin, messages, tools, seqs, prompt_len) in enumerate(segments):
        rows.append(
            {
                **session,
                "trace_index": i,
                "trace_count": len(segments),
                "lineage": lin,
                "messages": messages,
                "tools": orjson.dumps(tools).decode(),
                "trace": trace(i, prompt_len, seqs, lin),
            }
        )
    return rows


def traceless_rows(session_id: str = "sess-empty") -> list[dict[str, Any]]:
    row = session_rows(session_id=session_id)[0]
    return [{**row, "trace_count": 0, "lineage": None, "messages": [], "tools": "[]", "trace": None}]
