"""Lineage from the traffic alone: compactions, sub-agents, side calls and retries, and an SFT view that trains every
sampled answer once in the context it was sampled in (issue 22)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import CaptureRecord
from polar_cli.generate.rows import segment_rows
from polar_cli.trajectory import Build, per_request, prefix_merging
from tests.unit.trajectory.session_sim import (
    BASH,
    SYSTEM,
    TASK_TEXT,
    Sim,
    compact,
    pi_session,
    side_calls_and_a_retry,
    subagent_session,
    summary_text,
    tool_turns,
)


def lineages(build: Build) -> list[tuple[str, int | None]]:
    return [(t.metadata["lineage"]["kind"], t.metadata["lineage"]["parent"]) for t in build.traces]


def test_a_compaction_is_a_summary_and_a_compaction_of_the_trace_it_cut() -> None:
    sim = pi_session(1)
    build = prefix_merging(sim.records)
    assert lineages(build) == [("root", None), ("summary", 0), ("compaction", 0)]
    root, summary, compaction = build.traces
    assert summary.metadata["lineage"]["at_seq"] == max(root.seqs) == 2
    assert compaction.metadata["lineage"]["at_seq"] == 2
    assert "refused: context length" in summary.metadata["lineage"]["evidence"]
    # honest counts: the compacted chain is not full, and the session was cut
    assert root.metadata["end"] == "truncated" and "compaction" in root.metadata["end_reason"]
    stats = build.stats
    assert (stats.compactions, stats.subagents, stats.chains_truncated) == (1, 0, 1)
    assert stats.merge_rate is not None and stats.merge_rate < 1.0


def test_two_compactions_chain_from_each_other() -> None:
    build = prefix_merging(pi_session(2).records)
    assert lineages(build) == [("root", None), ("summary", 0), ("compaction", 0), ("summary", 2), ("compaction", 2)]
    assert build.stats.compactions == 2
    assert [t.metadata["end"] for t in build.traces] == ["truncated", "full", "truncated", "full", "full"]


def test_a_summary_call_that_resends_the_conversation_without_a_refusal() -> None:
    """opencode's way, before the limit: the whole history again, no tools, then a new conversation that carries the
    summary as an assistant turn."""
    sim = Sim()
    history = [SYSTEM, {"role": "user", "content": TASK_TEXT}]
    tool_turns(sim, history, [BASH], 3)
    summary = sim.call([*history, {"role": "user", "content": "Summarize the conversation."}], text=summary_text("oc"))
    history = [
        SYSTEM,
        {"role": "user", "content": "What did we do so far?"},
        summary,
        {"role": "user", "content": "Go"},
    ]
    tool_turns(sim, history, [BASH], 1, tag="after")
    build = prefix_merging(sim.records)
    assert lineages(build) == [("root", None), ("summary", 0), ("compaction", 0)]
    assert build.traces[1].metadata["lineage"]["evidence"] == "the summary's request re-sends this conversation"


def test_a_subagent_links_to_the_tool_call_that_spawned_it_and_keeps_its_own_compaction() -> None:
    sim, spawn = subagent_session()
    build = prefix_merging(sim.records)
    assert lineages(build) == [("root", None), ("subagent", 0), ("summary", 1), ("compaction", 1)]
    lineage = build.traces[1].metadata["lineage"]
    assert lineage["tool_call_id"] == spawn["tool_calls"][0]["id"]
    assert lineage["at_seq"] == 1  # the call that sampled the task tool call
    assert (build.stats.subagents, build.stats.compactions) == (1, 1)
    assert build.traces[0].metadata["end"] == "full"  # the parent was not cut: the sub-agent was


def test_side_calls_and_retries() -> None:
    sim = side_calls_and_a_retry()
    build = prefix_merging(sim.records)
    kinds = lineages(build)
    # the title request came first, but the main conversation is the root: the title is a side of it
    assert kinds[:2] == [("side", 1), ("root", None)]
    assert ("retry", 1) in kinds


def test_a_toolless_harness_that_resends_its_history_is_not_compacting() -> None:
    """aider has no tools: a break in its conversation carries earlier answers, which is no summary."""
    sim = Sim()
    history: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": TASK_TEXT}]
    answer = sim.call(history, text="I will read calc.py first, then edit line 3 where the minus sign is wrong.")
    history += [answer, {"role": "user", "content": "calc.py:\n def add(a, b): return a - b"}]
    sim.call(history, text="Here is the edit: replace the minus with a plus on line 3 and rerun the tests.")
    edited = [SYSTEM, {"role": "user", "content": TASK_TEXT + " (edited)"}, answer]
    sim.call([*edited, {"role": "user", "content": "go"}], text="Applied.")
    build = prefix_merging(sim.records)
    assert build.stats.compactions == 0
    assert all(kind != "summary" for kind, _ in lineages(build))


@pytest.mark.parametrize("builder", [prefix_merging, per_request])
def test_every_sampled_answer_is_trained_once_in_its_own_context(builder: Any) -> None:
    sim = pi_session(2)
    build = builder(sim.records)
    assert all("lineage" in t.metadata for t in build.traces)
    trained: dict[str, int] = {}
    for t in build.traces:
        messages = t.to_row()["messages"]
        for k, m in enumerate(messages):
            if m["role"] == "assistant" and "weight" not in m:
                trained[m["content"] or str(m["tool_calls"])] = trained.get(m["content"] or str(m["tool_calls"]), 0) + 1
                assert _context_of(sim.records, m) == _plain(messages[:k])
    answers = [r.response["choices"][0]["message"] for r in sim.records if r.status == "ok" and r.response]
    assert sorted(trained) == sorted(a["content"] or str(_calls(a)) for a in answers)
    assert set(trained.values()) == {1}


def test_the_root_segment_holds_the_task_byte_for_byte() -> None:
    build = prefix_merging(pi_session(1).records)
    rows = segment_rows({"key": "k", "session_id": "s1", "traces": [t.to_row() for t in build.traces]})
    assert [r["trace_index"] for r in rows] == [0, 1, 2] and {r["trace_count"] for r in rows} == {3}
    assert rows[0]["lineage"]["kind"] == "root"
    assert rows[0]["messages"][1] == {**rows[0]["messages"][1], "role": "user", "content": TASK_TEXT}
    assert all(TASK_TEXT not in str(r["messages"]) for r in rows[1:])
    assert rows[2]["trace"]["response_ids"] == build.traces[2].response_ids


def test_per_request_lineage_points_at_calls() -> None:
    build = per_request(pi_session(1).records)
    kinds = lineages(build)
    assert kinds[:3] == [("root", None), ("continuation", 0), ("continuation", 1)]
    assert kinds[3] == ("summary", 2) and kinds[4] == ("compaction", 2)
    assert build.stats.compactions == 1


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"id": c["id"], "type": "function", "function": c["function"]} for c in message.get("tool_calls") or ()]


def _context_of(records: list[CaptureRecord], answer: dict[str, Any]) -> list[tuple[str, str]]:
    """The request messages of the call that sampled ``answer``."""
    for r in records:
        message = (r.response or {}).get("choices", [{}])[0].get("message")
        if message and message["content"] == answer["content"] and _calls(message) == answer["tool_calls"]:
            return _plain(r.normalized["messages"])  # type: ignore[index]
    raise AssertionError(f"no call sampled {answer}")


def _plain(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(m["role"], str(m.get("content") or "")) for m in messages]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_segment_rows_of_a_compacted_session_load_with_datasets(tmp_path: Path, suffix: str) -> None:
    """One row per trace, weights on some messages only: both formats load, and the weights survive."""
    import datasets

    from polar_cli.corpus.writer import write_corpus

    sim = Sim()
    history = [SYSTEM, {"role": "user", "content": TASK_TEXT}]
    tool_turns(sim, history, [BASH], 2)
    history = compact(sim, history, [BASH], "kept")
    tool_turns(sim, history, [BASH], 1, tag="after")
    build = prefix_merging(sim.records)
    rows = segment_rows({"key": "k", "session_id": "s1", "traces": [t.to_row() for t in build.traces]})
    per_request_rows = segment_rows(
        {"key": "k2", "session_id": "s2", "traces": [t.to_row() for t in per_request(sim.records).traces]}
    )
    path = tmp_path / f"corpus{suffix}"
    assert write_corpus(path, [*rows, *per_request_rows]) == len(rows) + len(per_request_rows)
    kind = "json" if suffix == ".jsonl" else "parquet"
    ds = datasets.load_dataset(kind, data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    assert ds.num_rows == len(rows) + len(per_request_rows)
    weights = [m.get("weight") for r in ds for m in r["messages"] if m["role"] == "assistant"]
    assert 0 in weights and None in weights  # re-sent answers weigh 0, the others carry no weight (1)
    assert [r["lineage"]["kind"] for r in ds][: len(rows)] == [lin for lin, _ in lineages(build)]
