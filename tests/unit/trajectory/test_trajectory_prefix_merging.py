from __future__ import annotations

from typing import Any

import pytest
from trajectory_helpers import A, E, T, call, failed, mask_of

from polar_cli.trajectory import detect_eot_token_id, prefix_merging
from polar_cli.trajectory.trace import Trace

SYS = [10, 11]


def assert_arrays(trace: Trace, prompt: list[int], parts: list[tuple[list[int], int]]) -> None:
    ids, mask, logprobs = mask_of(parts)
    assert trace.prompt_ids == prompt
    assert trace.response_ids == ids
    assert trace.loss_mask == mask
    assert trace.response_logprobs == logprobs


def test_linear_session_with_tool_turns_merges_into_one_exact_trace() -> None:
    p0 = [*SYS, A]
    p1 = [*p0, 20, 21, E, T, 30, E, A]
    p2 = [*p1, 22, E, T, 31, 32, E, A]
    records = [
        call(0, p0, [20, 21, E], finish="tool_calls"),
        call(1, p1, [22, E], finish="tool_calls"),
        call(2, p2, [23, 24, E]),
    ]
    build = prefix_merging(records)
    assert len(build.traces) == 1
    (trace,) = build.traces
    # only the first E after the chain's last prompt closes the turn; the tool turn's own E is interstitial
    assert_arrays(
        trace,
        p0,
        [([20, 21, E], 1), ([T, 30, E, A], 0), ([22, E], 1), ([T, 31, 32, E, A], 0), ([23, 24, E], 1)],
    )
    assert trace.prompt_ids + trace.response_ids == [*p2, 23, 24, E]
    assert trace.seqs == (0, 1, 2)
    assert trace.finish_reason == "stop"
    assert trace.metadata["turns"] == [[0, 0, 3], [1, 7, 9], [2, 14, 17]]
    assert trace.metadata["eot_token_id"] == E
    assert trace.metadata["end"] == "full"
    s = build.stats
    assert (s.chains_total, s.chains_full, s.chains_truncated) == (1, 1, 0)
    assert (s.completions_total, s.completions_merged, s.completions_skipped) == (3, 2, 0)
    assert s.splits == ()


def test_turn_cut_by_max_tokens_takes_its_end_of_turn_from_the_next_prompt() -> None:
    p0 = [*SYS, A]
    p1 = [*p0, 20, 21, E, 4, 40, E, A]  # the template closes the cut turn with E
    records = [call(0, p0, [20, 21], finish="length"), call(1, p1, [22, E])]
    (trace,) = prefix_merging(records).traces
    assert_arrays(trace, p0, [([20, 21], 1), ([E, 4, 40, E, A], 0), ([22, E], 1)])
    assert trace.metadata["turns_cut"] == [0]
    assert trace.metadata["turns_drifted"] == []


def test_drifted_rendering_still_merges_and_keeps_the_sampled_ids() -> None:
    p0 = [*SYS, A]
    p1 = [*p0, 20, 99, 21, E, T, 30, E, A]  # the template re-rendered the answer as [20 99 21]
    records = [call(0, p0, [20, 21, E]), call(1, p1, [22, E])]
    build = prefix_merging(records)
    (trace,) = build.traces
    assert_arrays(trace, p0, [([20, 21, E], 1), ([T, 30, E, A], 0), ([22, E], 1)])
    assert trace.metadata["turns_drifted"] == [0]
    assert build.stats.turns_drifted == 1


def test_interleaved_side_chain_stays_separate() -> None:
    main0 = [*SYS, A]
    side0 = [50, 51, A]
    main1 = [*main0, 20, E, T, 30, E, A]
    side1 = [*side0, 60, E, 4, 61, E, A]
    main2 = [*main1, 21, E, T, 31, E, A]
    records = [
        call(0, main0, [20, E]),
        call(1, side0, [60, E]),
        call(2, main1, [21, E]),
        call(3, side1, [62, E]),
        call(4, main2, [22, E]),
    ]
    build = prefix_merging(records)
    main, side = build.traces
    assert main.seqs == (0, 2, 4)
    assert_arrays(main, main0, [([20, E], 1), ([T, 30, E, A], 0), ([21, E], 1), ([T, 31, E, A], 0), ([22, E], 1)])
    assert side.seqs == (1, 3)
    assert_arrays(side, side0, [([60, E], 1), ([4, 61, E, A], 0), ([62, E], 1)])
    (split,) = build.stats.splits
    assert (split.seq, split.chain, split.kind, split.closest) == (1, 1, "unrelated", None)
    assert (build.stats.chains_full, build.stats.chains_truncated, build.stats.completions_merged) == (2, 0, 3)


def test_sub_agent_sharing_the_system_prompt_splits_without_truncating_the_main_chain() -> None:
    main0 = [*SYS, A]
    sub0 = [10, 70, A]  # shares only the first system id
    main1 = [*main0, 20, E, T, 30, E, A]
    records = [call(0, main0, [20, E]), call(1, sub0, [71, E]), call(2, main1, [21, E])]
    build = prefix_merging(records)
    assert [t.seqs for t in build.traces] == [(0, 2), (1,)]
    (split,) = build.stats.splits
    assert (split.kind, split.closest, split.at) == ("prefix_break", 0, 1)
    assert split.expected == (11, A) and split.found == (70, A)
    assert build.stats.chains_truncated == 0
    assert [t.metadata["end"] for t in build.traces] == ["full", "full"]


def test_compaction_ends_the_chain_as_truncated() -> None:
    p0 = [*SYS, A]
    p1 = [*p0, 20, E, T, 30, E, A]
    compacted = [*SYS, 88, E, A]  # history replaced by a summary
    p3 = [*compacted, 22, E, T, 32, E, A]
    records = [call(0, p0, [20, E]), call(1, p1, [21, E]), call(2, compacted, [22, E]), call(3, p3, [23, E])]
    build = prefix_merging(records)
    before, after = build.traces
    assert before.seqs == (0, 1) and after.seqs == (2, 3)
    assert before.metadata["end"] == "truncated"
    assert before.metadata["end_reason"].startswith("call 2: prefix_break")
    assert after.metadata["start"] == "prefix_break"
    assert after.metadata["end"] == "full"
    assert_arrays(after, compacted, [([22, E], 1), ([T, 32, E, A], 0), ([23, E], 1)])
    (split,) = build.stats.splits
    assert (split.seq, split.kind, split.closest, split.at) == (2, "prefix_break", 0, 2)
    s = build.stats
    assert (s.chains_total, s.chains_full, s.chains_truncated, s.completions_merged) == (2, 1, 1, 2)


def test_harness_retry_of_the_same_prompt_splits_and_the_conversation_follows_the_retry() -> None:
    p0 = [*SYS, A]
    p1 = [*p0, 21, E, T, 30, E, A]  # renders the retry's answer [21 E], not the first [20 E]
    records = [call(0, p0, [20, E]), call(1, p0, [21, E]), call(2, p1, [22, E])]
    build = prefix_merging(records)
    first, retried = build.traces
    assert first.seqs == (0,) and retried.seqs == (1, 2)
    assert_arrays(retried, p0, [([21, E], 1), ([T, 30, E, A], 0), ([22, E], 1)])
    assert retried.metadata["turns_drifted"] == []
    assert first.metadata["end"] == "truncated"
    assert first.metadata["end_reason"].startswith("call 1: retry")
    (split,) = build.stats.splits
    assert (split.kind, split.closest, split.at) == ("retry", 0, len(p0))


def test_after_a_retry_the_chain_whose_answer_was_rendered_wins() -> None:
    p0 = [*SYS, A]
    p1 = [*p0, 20, E, T, 30, E, A]  # the harness kept the FIRST answer
    records = [call(0, p0, [20, E]), call(1, p0, [21, E]), call(2, p1, [22, E])]
    build = prefix_merging(records)
    assert [t.seqs for t in build.traces] == [(0, 2), (1,)]
    assert build.stats.chains_truncated == 0


def test_failed_calls_are_skipped_and_counted() -> None:
    p0 = [*SYS, A]
    p1 = [*p0, 20, E, T, 30, E, A]
    empty_ok = call(3, p1, [])
    records = [call(0, p0, [20, E]), failed(1), call(2, p1, [21, E]), empty_ok]
    build = prefix_merging(records)
    (trace,) = build.traces
    assert trace.seqs == (0, 2)
    assert_arrays(trace, p0, [([20, E], 1), ([T, 30, E, A], 0), ([21, E], 1)])
    s = build.stats
    assert (s.completions_total, s.completions_merged, s.completions_skipped) == (2, 1, 2)
    assert s.skip_counts() == {"status upstream_error": 1, "no token ids": 1}


def test_records_are_taken_in_seq_order() -> None:
    p0 = [*SYS, A]
    p1 = [*p0, 20, E, T, 30, E, A]
    (trace,) = prefix_merging([call(1, p1, [21, E]), call(0, p0, [20, E])]).traces
    assert trace.seqs == (0, 1)


def test_prompt_without_end_of_turn_after_the_chain_splits() -> None:
    p0 = [*SYS, A]
    p1 = [*p0, 20, 21]  # continues the assistant turn (prefill) instead of closing it
    build = prefix_merging([call(0, p0, [20, 21, E]), call(1, p1, [22, E])])
    assert [t.seqs for t in build.traces] == [(0,), (1,)]
    (split,) = build.stats.splits
    assert (split.kind, split.closest, split.at) == ("no_end_of_turn", 0, len(p0))
    assert build.stats.chains_truncated == 1


def test_unknown_end_of_turn_keeps_calls_apart() -> None:
    p0 = [*SYS, A]
    p1 = [*p0, 20, E, A]
    build = prefix_merging([call(0, p0, [20], finish="length"), call(1, p1, [21], finish="length")])
    assert len(build.traces) == 2
    assert [s.kind for s in build.stats.splits] == ["eot_unknown"]
    assert build.traces[0].metadata["eot_token_id"] is None


def test_configured_end_of_turn_overrides_detection() -> None:
    p0 = [*SYS, A]
    p1 = [*p0, 20, 7, T, 30, 7, A]  # this model ends turns with 7
    records = [call(0, p0, [20, 7], finish="stop"), call(1, p1, [21, 7], finish="stop")]
    (trace,) = prefix_merging(records, eot_token_id=7).traces
    assert trace.response_ids == [20, 7, T, 30, 7, A, 21, 7]
    assert trace.loss_mask == [1, 1, 0, 0, 0, 0, 1, 1]


@pytest.mark.parametrize(
    ("records", "expected"),
    [
        ([call(0, [1, A], [20, 21], finish="length"), call(1, [1, A], [20, E], finish="tool_calls")], E),
        # a matched stop string ends on an ordinary id: not evidence of the end-of-turn id
        ([call(0, [1, A], [20, 44], finish="stop", stop=["x"]), call(1, [1, A], [20, 9], finish="stop")], 9),
        ([failed(0), call(1, [1, A], [20, 21], finish="length")], None),
    ],
)
def test_detect_eot_token_id(records: list, expected: int | None) -> None:
    assert detect_eot_token_id(records) == expected


def test_messages_of_a_merged_chain_run_from_first_prompt_to_last_answer() -> None:
    p0 = [*SYS, A]
    p1 = [*p0, 20, E, T, 30, E, A]
    m0: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "fix it"}]
    call_msg: dict[str, Any] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd":"ls"}'}}],
    }
    m1 = [*m0, call_msg, {"role": "tool", "tool_call_id": "c1", "content": "a.py"}]
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    records = [
        call(0, p0, [20, E], messages=m0, tools=tools, reply=call_msg),
        call(1, p1, [21, E], messages=m1, tools=tools, reply={"role": "assistant", "content": "done"}),
    ]
    (trace,) = prefix_merging(records).traces
    assert [m["role"] for m in trace.prompt_messages] == ["system", "user"]
    assert [m["role"] for m in trace.response_messages] == ["assistant", "tool", "assistant"]
    assert trace.response_messages[0]["tool_calls"][0]["function"] == {"name": "bash", "arguments": '{"cmd":"ls"}'}
    assert trace.response_messages[1]["tool_call_id"] == "c1"
    assert trace.response_messages[2]["content"] == "done"
    assert trace.tools == tools
