from __future__ import annotations

from trajectory_helpers import A, E, T, call, failed, lp

from polar_cli.trajectory import per_request


def test_one_trace_per_trainable_call_all_sampled_ids_trainable() -> None:
    p0 = [10, A]
    p1 = [*p0, 20, E, T, 30, E, A]
    build = per_request([call(0, p0, [20, E]), failed(1), call(2, p1, [21, 22], finish="length")])
    first, second = build.traces
    assert (first.prompt_ids, first.response_ids, first.loss_mask) == (p0, [20, E], [1, 1])
    assert first.response_logprobs == lp([20, E])
    assert (second.prompt_ids, second.response_ids, second.loss_mask) == (p1, [21, 22], [1, 1])
    assert second.seqs == (2,)
    assert second.finish_reason == "length"
    assert second.metadata["turns_cut"] == [2]
    assert second.metadata["strategy"] == "per_request"
    s = build.stats
    assert (s.chains_total, s.chains_full, s.completions_total, s.completions_merged, s.completions_skipped) == (
        2,
        2,
        2,
        0,
        1,
    )


def test_each_trace_carries_its_own_call_messages_and_answer() -> None:
    msgs = [{"role": "user", "content": "hi"}]
    (trace,) = per_request([call(0, [10, A], [20, E], messages=msgs, reply={"content": "hello"})]).traces
    assert [(m["role"], m["content"]) for m in trace.messages] == [("user", "hi"), ("assistant", "hello")]
