from __future__ import annotations

from typing import Any, get_args

import pytest
from trajectory_helpers import A, E, T, call, failed, mask_of

from polar_cli.capture import CaptureRecord
from polar_cli.capture.ids import common_prefix_len
from polar_cli.trajectory import detect_eot_token_id, prefix_merging
from polar_cli.trajectory.prefix_merging import drift_tokens
from polar_cli.trajectory.stats import SplitKind
from polar_cli.trajectory.trace import Trace
from tests.support import chatml_ids

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


# drift (Rule 3): how many ids, and the strict policy


@pytest.mark.parametrize(
    ("sampled", "rendered", "tokens"),
    [
        ([20, 21, 22], [20, 21, 22], 0),
        ([], [], 0),
        ([20, 21, 22, 23, 24], [20, 91, 92, 93, 24], 3),  # three substituted ids
        ([20, 21], [20, 99, 21], 1),  # one inserted id
        ([20, 99, 21], [20, 21], 1),  # one dropped id
        ([20, 21], [30, 31, 32, 33], 4),  # nothing in common: the longer side
        ([7, 7, 7], [7, 7], 1),  # prefix and suffix never overlap
        ([], [40, 41], 2),
    ],
)
def test_drift_tokens(sampled: list[int], rendered: list[int], tokens: int) -> None:
    assert drift_tokens(sampled, rendered) == tokens
    assert drift_tokens(rendered, sampled) == tokens


def _drifting_session() -> tuple[list[int], list[int], list[int], list[Any]]:
    """Call 1's prompt renders call 0's answer [20 21 22 23 24] as [20 91 92 93 24]; calls 2 and 3 extend call 1."""
    p0 = [*SYS, A]
    p1 = [*p0, 20, 91, 92, 93, 24, E, T, 30, E, A]
    p2 = [*p1, 25, E, T, 31, E, A]
    p3 = [*p2, 26, E, T, 32, E, A]
    records = [
        call(0, p0, [20, 21, 22, 23, 24, E]),
        call(1, p1, [25, E]),
        call(2, p2, [26, E]),
        call(3, p3, [27, E]),
    ]
    return p0, p1, p3, records


def test_tolerant_drift_counts_the_differing_ids_per_trace_and_per_build() -> None:
    *_, records = _drifting_session()
    build = prefix_merging(records, drift="tolerant")
    (trace,) = build.traces
    assert trace.seqs == (0, 1, 2, 3)
    assert trace.response_ids[:6] == [20, 21, 22, 23, 24, E]  # the sampled ids are kept
    assert trace.metadata["turns_drifted"] == [0]
    assert trace.metadata["drift_tokens"] == 3
    s = build.stats
    assert (s.turns_drifted, s.drift_tokens, s.completions_merged, s.merge_rate) == (1, 3, 3, 1.0)
    assert prefix_merging(records) == build  # tolerant is the default


def test_strict_drift_starts_a_new_trace_there_and_the_chain_goes_on_from_it() -> None:
    p0, p1, p3, records = _drifting_session()
    build = prefix_merging(records, drift="strict")
    first, rest = build.traces
    assert first.seqs == (0,) and rest.seqs == (1, 2, 3)
    assert_arrays(first, p0, [([20, 21, 22, 23, 24, E], 1)])
    assert rest.prompt_ids == p1
    # nothing drifted inside a strict trace: prompt + response is exactly the last call's prompt + sampled ids
    assert rest.prompt_ids + rest.response_ids == [*p3, 27, E]
    assert rest.metadata["start"] == "drift"
    assert first.metadata["end"] == "truncated"
    assert first.metadata["end_reason"].startswith("call 1: drift")
    (split,) = build.stats.splits
    # the rendering leaves the sampled ids after [20]: at prompt position len(p0) + 1
    assert (split.seq, split.chain, split.kind, split.closest, split.at) == (1, 1, "drift", 0, len(p0) + 1)
    assert split.expected == (21, 22, 23, 24) and split.found == (91, 92, 93, 24)
    s = build.stats
    assert (s.chains_total, s.chains_full, s.chains_truncated) == (2, 1, 1)
    assert (s.completions_merged, s.conversations, s.turns_drifted, s.drift_tokens) == (2, 1, 0, 0)
    assert s.merge_rate == round(2 / 3, 4)
    assert s.split_counts() == {**dict.fromkeys(get_args(SplitKind), 0), "drift": 1}


def test_strict_drift_splits_only_at_the_drifted_turn() -> None:
    p0 = [*SYS, A]
    p1 = [*p0, 20, E, T, 30, E, A]
    p2 = [*p1, 99, E, T, 31, E, A]  # renders call 1's answer [21] as [99]
    p3 = [*p2, 22, E, T, 32, E, A]
    records = [call(0, p0, [20, E]), call(1, p1, [21, E]), call(2, p2, [22, E]), call(3, p3, [23, E])]
    build = prefix_merging(records, drift="strict")
    assert [t.seqs for t in build.traces] == [(0, 1), (2, 3)]
    assert [s.kind for s in build.stats.splits] == ["drift"]
    assert build.stats.splits[0].at == len(p1)
    assert prefix_merging(records, drift="tolerant").stats.drift_tokens == 1


def test_an_unknown_drift_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="drift policy 'lenient'"):
        prefix_merging([], drift="lenient")  # type: ignore[arg-type]


# side requests (Rule 5), on ChatML-shaped ids: IM opens a message, then its role id and a newline

IM, SYSTEM_ROLE, USER_ROLE, NL = 6, 7, 8, 9
FIRST = [IM, SYSTEM_ROLE, NL, 10, 11, E, IM, USER_ROLE, NL, 40, 41, E, A]  # the E closing the user turn: index 11


def _main_chain() -> list[CaptureRecord]:
    p1 = [*FIRST, 20, E, T, 30, E, A]
    p2 = [*p1, 21, E, T, 31, E, A]
    return [call(0, FIRST, [20, E]), call(1, p1, [21, E]), call(2, p2, [22, E])]


@pytest.mark.parametrize(
    "side",
    [
        [IM, SYSTEM_ROLE, NL, 10, 11, E, IM, USER_ROLE, NL, 60, E, A],  # same system prompt, another user turn
        [IM, SYSTEM_ROLE, NL, 50, E, IM, USER_ROLE, NL, 60, E, A],  # another system prompt
        [IM, SYSTEM_ROLE, NL, 10, 11, E, IM, USER_ROLE, NL, 40, 41, 42, E, A],  # leaves at the E itself (k == 11)
    ],
)
def test_a_side_request_after_the_last_call_is_a_new_root_and_the_main_chain_stays_full(side: list[int]) -> None:
    build = prefix_merging([*_main_chain(), call(3, side, [61, E])])
    main, title = build.traces
    assert main.seqs == (0, 1, 2) and title.seqs == (3,)
    assert main.metadata["end"] == "full" and main.metadata["end_reason"] is None
    assert title.metadata["start"] == "side_request"
    (split,) = build.stats.splits
    assert (split.seq, split.kind, split.closest) == (3, "side_request", 0)
    assert split.at == common_prefix_len(side, FIRST) <= 11
    s = build.stats
    assert (s.chains_total, s.chains_full, s.chains_truncated, s.conversations) == (2, 2, 0, 2)
    assert s.merge_rate == 1.0


def test_sharing_the_whole_first_request_is_a_prefix_break_that_truncates() -> None:
    records = _main_chain()
    edited = [*FIRST, 20, E, T, 99, E, A]  # the first tool result edited
    build = prefix_merging([*records, call(3, edited, [23, E])])
    (split,) = build.stats.splits
    assert (split.kind, split.closest, split.at) == ("prefix_break", 0, len(FIRST) + 3)
    assert build.traces[0].metadata["end"] == "truncated"
    assert build.stats.conversations == 1
    assert build.stats.merge_rate == round(2 / 3, 4)
    # one id past the first request's closing E: already the conversation's own text
    just_past = [*FIRST[:12], 88, E, A]
    (split,) = prefix_merging([*records, call(3, just_past, [23, E])]).stats.splits
    assert (split.kind, split.at) == ("prefix_break", 12)


def test_a_side_request_before_the_main_conversation_starts_it_as_a_new_root() -> None:
    p1 = [*FIRST, 20, E, T, 30, E, A]
    title = [IM, SYSTEM_ROLE, NL, 10, 11, E, IM, USER_ROLE, NL, 60, E, A]
    build = prefix_merging([call(0, title, [61, E]), call(1, FIRST, [20, E]), call(2, p1, [21, E])])
    assert [t.seqs for t in build.traces] == [(0,), (1, 2)]
    assert [t.metadata["start"] for t in build.traces] == ["session_start", "side_request"]
    assert [t.metadata["end"] for t in build.traces] == ["full", "full"]
    assert (build.stats.conversations, build.stats.merge_rate) == (2, 1.0)


def test_side_requests_on_real_rendered_ids() -> None:
    """The ChatML double's template: a title request sharing the system prompt after the conversation ended."""
    system = {"role": "system", "content": "You are a coding agent. Be brief."}
    task = {"role": "user", "content": "Fix the failing test in utils.py"}
    answer = "I will read utils.py first."
    turns = [
        [system, task],
        [system, task, {"role": "assistant", "content": answer}, {"role": "user", "content": "It is line 3."}],
    ]
    sampled = [[i for i, _ in chatml_ids.sampled_pieces(text, stopped=True)] for text in (answer, "Fixed.")]
    title = chatml_ids.prompt_ids([system, {"role": "user", "content": "Fix a title for this conversation"}])
    edited = chatml_ids.prompt_ids([system, task, {"role": "assistant", "content": "I will not."}])
    records = [
        call(0, chatml_ids.prompt_ids(turns[0]), sampled[0], finish="stop"),
        call(1, chatml_ids.prompt_ids(turns[1]), sampled[1], finish="stop"),
        call(2, title, [chatml_ids.DEFAULT_EOT_ID], finish="stop"),
        call(3, edited, [chatml_ids.DEFAULT_EOT_ID], finish="stop"),
    ]
    build = prefix_merging(records)
    assert build.traces[0].metadata["eot_token_id"] == chatml_ids.DEFAULT_EOT_ID
    assert [t.seqs for t in build.traces] == [(0, 1), (2,), (3,)]
    assert build.stats.turns_drifted == 0
    assert [(s.seq, s.kind, s.closest) for s in build.stats.splits] == [(2, "side_request", 0), (3, "prefix_break", 0)]
    # shared: the system message, the user turn's header (3 ids) and its first word "Fix"; the E closing the
    # main chain's first user turn is far behind
    system_ids = len(chatml_ids.prompt_ids([system])) - 3  # without the generation prompt
    assert build.stats.splits[0].at == system_ids + 4 < records[0].prompt_ids.index(chatml_ids.DEFAULT_EOT_ID, 14)
    assert [t.metadata["end"] for t in build.traces] == ["truncated", "full", "full"]
    without_edit = prefix_merging(records[:3])
    assert [t.metadata["end"] for t in without_edit.traces] == ["full", "full"]
    assert (without_edit.stats.chains_truncated, without_edit.stats.merge_rate) == (0, 1.0)


def test_a_chain_started_by_a_break_keeps_its_conversations_first_request() -> None:
    p1 = [*FIRST, 20, 90, E, T, 30, E, A]  # renders call 0's answer [20 21] as [20 90]
    p2 = [*p1, 22, E, T, 31, E, A]
    title = [IM, SYSTEM_ROLE, NL, 10, 11, E, IM, USER_ROLE, NL, 60, E, A]
    edited = [*FIRST[:12], 88, E, A]  # the first request, then other history
    records = [call(0, FIRST, [20, 21, E]), call(1, p1, [22, E]), call(2, p2, [23, E])]
    for late, kind in ((title, "side_request"), (edited, "prefix_break")):
        build = prefix_merging([*records, call(3, late, [61, E])], drift="strict")
        assert [t.seqs for t in build.traces] == [(0,), (1, 2), (3,)]
        # both chains share as much; the newer one, started by the drift split, is closest, and its first request
        # is still FIRST's (up to index 11), not all of p1
        assert [(s.kind, s.closest) for s in build.stats.splits] == [("drift", 0), (kind, 1)]
        assert build.traces[1].metadata["end"] == ("full" if kind == "side_request" else "truncated")
