"""The ATIF export of rows the real pipeline makes: simulated harness traffic (`session_sim`) through the builders,
`with_lineage` and `generate.rows.segment_rows`, then `session_to_atif`, checked by Harbor's models and against
every trace's turns (each sampled call one agent step, its exact token slices, none lost, none twice)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from harbor.models.trajectories import Trajectory

from polar_cli.export import session_to_atif
from polar_cli.generate.rows import segment_rows
from polar_cli.trajectory import per_request, prefix_merging
from tests.unit.trajectory.session_sim import Sim, pi_session, side_calls_and_a_retry, subagent_session


def compacting_twice() -> Sim:
    return pi_session(2)


def subagent_that_compacts() -> Sim:
    return subagent_session()[0]


def trajectories(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield doc
    for sub in doc.get("subagent_trajectories") or []:
        yield from trajectories(sub)


@pytest.mark.parametrize("builder", [prefix_merging, per_request])
@pytest.mark.parametrize("session", [compacting_twice, subagent_that_compacts, side_calls_and_a_retry])
def test_built_sessions_export_every_call_once_with_its_tokens(session: Any, builder: Any) -> None:
    records = session().records
    build = builder(records)
    rows = segment_rows({"key": "k", "session_id": "s1", "harness": "pi", "traces": [t.to_row() for t in build.traces]})
    doc = session_to_atif(rows)
    assert doc is not None
    Trajectory.model_validate(doc)
    seen = []
    for t in trajectories(doc):
        for step in t["steps"]:
            if "metrics" in step:
                trace = rows[step["extra"]["trace_index"]]["trace"]
                seq = step["metrics"]["extra"]["seq"]
                ((start, end),) = [(a, b) for s, a, b in trace["metadata"]["turns"] if s == seq]
                assert step["metrics"]["completion_token_ids"] == trace["response_ids"][start:end]
                assert step["metrics"]["logprobs"] == trace["response_logprobs"][start:end]
                assert step["metrics"]["prompt_token_ids"] == trace["prompt_ids"] + trace["response_ids"][:start]
                seen.append(seq)
        assert "unmatched_turns" not in t["extra"]
    assert sorted(seen) == [r.seq for r in records if r.status == "ok"]
    # every trace is in the document once: as (part of) a trajectory's main line
    held = [x["trace_index"] for t in trajectories(doc) for x in t["extra"]["traces"]]
    assert sorted(held) == list(range(len(rows)))


def test_a_subagent_built_from_traffic_hangs_off_its_task_call() -> None:
    build = prefix_merging(subagent_that_compacts().records)
    rows = segment_rows({"key": "k", "session_id": "s1", "traces": [t.to_row() for t in build.traces]})
    doc = session_to_atif(rows)
    assert doc is not None
    call_id = rows[1]["lineage"]["tool_call_id"]
    (spawner,) = [s for s in doc["steps"] if any(c["tool_call_id"] == call_id for c in s.get("tool_calls") or [])]
    (ref,) = spawner["observation"]["results"][0]["subagent_trajectory_ref"]
    (sub,) = doc["subagent_trajectories"]
    assert ref["trajectory_id"] == sub["trajectory_id"] == "s1/trace-1"
    # the sub-agent's own compaction goes on inside it, its summary embedded in it
    assert [x["trace_index"] for x in sub["extra"]["traces"]] == [1, 3]
    assert [t["trajectory_id"] for t in sub["subagent_trajectories"]] == ["s1/trace-2"]
