"""`session_to_atif`: a session's rows (root, sub-agent, summary + compaction) as ATIF, checked by Harbor's own
pydantic models (the version pinned in pyproject.toml's ``atif`` extra) and against the rows' token arrays."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harbor.models.trajectories import Trajectory

from polar_cli.export import session_to_atif
from tests.support.session_rows import SPAWN_PROMPT, SUB_SUMMARY, SUMMARY, TASK, session_rows, traceless_rows

ROOT = Path(__file__).resolve().parents[3]


def trajectories(doc: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield doc
    for sub in doc.get("subagent_trajectories") or []:
        yield from trajectories(sub)


def embedded(doc: dict[str, Any], trajectory_id: str) -> dict[str, Any]:
    (found,) = [t for t in trajectories(doc) if t["trajectory_id"] == trajectory_id]
    return found


def test_the_installed_harbor_is_the_pinned_one() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (pin,) = [re.fullmatch(r"harbor==(\S+)", d)[1] for d in extras["atif"] if d.startswith("harbor")]  # type: ignore[index]
    assert importlib.metadata.version("harbor") == pin


@pytest.mark.parametrize("subagent_compacts", [False, True])
def test_the_export_is_valid_atif(subagent_compacts: bool) -> None:
    doc = session_to_atif(session_rows(subagent_compacts=subagent_compacts))
    assert doc is not None
    parsed = Trajectory.model_validate(doc)
    assert parsed.session_id == "sess-1"
    assert parsed.agent.name == "opencode" and parsed.agent.model_name == "qwen3-tiny"
    # the validated model dumps back to what was written: no field was dropped or renamed on the way
    assert parsed.to_json_dict() == doc


@pytest.mark.parametrize("subagent_compacts", [False, True])
def test_every_sampled_call_is_one_agent_step_with_its_turns_slices(subagent_compacts: bool) -> None:
    rows = session_rows(subagent_compacts=subagent_compacts)
    doc = session_to_atif(rows)
    assert doc is not None
    seen = []
    for t in trajectories(doc):
        for step in t["steps"]:
            if "metrics" not in step:
                continue
            index, seq = step["extra"]["trace_index"], step["metrics"]["extra"]["seq"]
            trace = rows[index]["trace"]
            ((start, end),) = [(a, b) for s, a, b in trace["metadata"]["turns"] if s == seq]
            m = step["metrics"]
            assert m["completion_token_ids"] == trace["response_ids"][start:end]
            assert m["logprobs"] == trace["response_logprobs"][start:end]
            assert m["prompt_token_ids"] == trace["prompt_ids"] + trace["response_ids"][:start]
            assert (m["prompt_tokens"], m["completion_tokens"]) == (len(m["prompt_token_ids"]), end - start)
            assert step["source"] == "agent" and step["llm_call_count"] == 1 and not step.get("is_copied_context")
            seen.append((index, seq))
    # nothing lost, nothing twice: exactly the calls of every trace's turns
    turns = [(r["trace_index"], s) for r in rows for s, _, _ in r["trace"]["metadata"]["turns"]]
    assert sorted(seen) == sorted(turns)


def test_the_root_holds_the_task_and_the_compaction_goes_on_in_the_same_trajectory() -> None:
    doc = session_to_atif(session_rows())
    assert doc is not None
    steps = doc["steps"]
    assert [s["message"] for s in steps[:2]] == ["You are opencode, a coding agent.", TASK]
    (boundary,) = [s for s in steps if (s.get("extra") or {}).get("context_management")]
    assert boundary["source"] == "system"
    assert boundary["extra"]["context_management"] == {"type": "compaction", "boundary": "replace"}
    assert boundary["extra"]["lineage"]["kind"] == "compaction"
    # the summary call is its own trajectory, referenced from the boundary
    (ref,) = boundary["observation"]["results"][0]["subagent_trajectory_ref"]
    summary = embedded(doc, ref["trajectory_id"])
    assert summary["steps"][-1]["message"] == SUMMARY and "metrics" in summary["steps"][-1]
    assert summary["agent"]["name"] == "opencode/summary"
    # its re-sent history is copied context: no tokens, not to be trained there
    resent = [s for s in summary["steps"] if s["source"] == "agent" and s is not summary["steps"][-1]]
    assert len(resent) == 3 and all(s.get("is_copied_context") and "metrics" not in s for s in resent)
    # after the boundary: the system prompt and task re-sent (copied), then the summary as the compaction sent it
    after = steps[steps.index(boundary) + 1 :]
    assert [s.get("is_copied_context", False) for s in after[:3]] == [True, True, False]
    assert after[2]["message"] == SUMMARY
    assert after[-1]["message"] == "Done: parse_date now raises ValueError."
    assert doc["final_metrics"]["total_steps"] == len(steps)


def test_a_subagent_is_embedded_and_referenced_from_the_tool_call_that_spawned_it() -> None:
    doc = session_to_atif(session_rows())
    assert doc is not None
    (spawner,) = [s for s in doc["steps"] if any(c["tool_call_id"] == "c2" for c in s.get("tool_calls") or [])]
    assert spawner["tool_calls"][0]["arguments"] == {"prompt": SPAWN_PROMPT}
    (result,) = spawner["observation"]["results"]
    assert result["source_call_id"] == "c2"
    (ref,) = result["subagent_trajectory_ref"]
    sub = embedded(doc, ref["trajectory_id"])
    assert ref["trajectory_id"] == "sess-1/trace-1" and ref["extra"]["kind"] == "subagent"
    assert sub["agent"]["name"] == "opencode/subagent"
    assert [t["function"]["name"] for t in sub["agent"]["tool_definitions"]] == ["grep"]
    assert sub["steps"][1] == {
        "step_id": 2,
        "source": "user",
        "message": SPAWN_PROMPT,
        "extra": {"trace_index": 1, "message_index": 1},
    }


def test_a_subagent_that_compacts_holds_its_own_summary_and_compaction() -> None:
    rows = session_rows(subagent_compacts=True)
    doc = session_to_atif(rows)
    assert doc is not None
    sub = embedded(doc, "sess-1/trace-1")
    assert [t["trace_index"] for t in sub["extra"]["traces"]] == [1, 3]
    (boundary,) = [s for s in sub["steps"] if (s.get("extra") or {}).get("context_management")]
    (ref,) = boundary["observation"]["results"][0]["subagent_trajectory_ref"]
    assert ref["trajectory_id"] == "sess-1/trace-2"
    assert embedded(sub, "sess-1/trace-2")["steps"][-1]["message"] == SUB_SUMMARY
    # the root's own compaction is still the root's
    assert [t["trace_index"] for t in doc["extra"]["traces"]] == [0, 5]
    assert [t["trajectory_id"] for t in doc["subagent_trajectories"]] == ["sess-1/trace-1", "sess-1/trace-4"]


def test_a_side_call_without_a_spawning_tool_call_is_anchored_after_its_parents_call() -> None:
    rows = session_rows()
    side = {**rows[1], "lineage": {"kind": "side", "parent": 0, "at_seq": 0, "tool_call_id": None}}
    doc = session_to_atif([rows[0], side, rows[2], rows[3]])
    assert doc is not None
    Trajectory.model_validate(doc)
    call_0 = next(i for i, s in enumerate(doc["steps"]) if (s.get("extra") or {}).get("seq") == 0)
    anchor = doc["steps"][call_0 + 1]
    assert anchor["source"] == "system" and anchor["extra"]["lineage"]["kind"] == "side"
    assert anchor["observation"]["results"][0]["subagent_trajectory_ref"][0]["trajectory_id"] == "sess-1/trace-1"


def test_without_prompt_ids_the_counts_stay() -> None:
    doc = session_to_atif(session_rows(), prompt_ids=False)
    assert doc is not None
    Trajectory.model_validate(doc)
    agent = [s for t in trajectories(doc) for s in t["steps"] if "metrics" in s]
    assert agent and all("prompt_token_ids" not in s["metrics"] and s["metrics"]["prompt_tokens"] > 0 for s in agent)


def test_freeform_tool_arguments_are_kept_whole() -> None:
    rows = session_rows()
    patch = "*** Begin Patch\n*** Update File: utils/dates.py\n*** End Patch"
    rows[0]["messages"][2] = {**rows[0]["messages"][2], "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "apply_patch", "arguments": patch}}
    ]}  # fmt: skip
    doc = session_to_atif(rows)
    assert doc is not None
    Trajectory.model_validate(doc)
    (call,) = doc["steps"][2]["tool_calls"]
    assert call["arguments"] == {} and call["extra"] == {"raw_arguments": patch}


def test_a_session_without_a_trace_has_no_trajectory_and_a_torn_one_is_refused() -> None:
    assert session_to_atif(traceless_rows()) is None
    rows = session_rows()
    with pytest.raises(ValueError, match=r"rows hold traces \[0, 1, 3\] of 4"):
        session_to_atif([rows[0], rows[1], rows[3]])
