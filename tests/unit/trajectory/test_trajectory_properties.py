"""Property tests on generated sessions: a small harness simulator drives several conversations at once.

Each conversation renders the previous answer exactly (sampled ids, then E if the model did not sample it), then a
tool result, then the opening of the next assistant turn, like a chat template would. Ops interleave conversations,
start new ones (sharing 0..3 system ids), retry the last prompt, compact history and fail calls; ``drift`` renders
the previous answer with its first id changed, as a template that re-serialises an answer would.

Every build is also run on the same records stored and read back as prompt views (`Expander(views=True)`), and must
come out the same: the views' pointer test for "extends" is an optimisation, never a different answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from trajectory_helpers import A, E, T, call, failed

from polar_cli.capture import CaptureRecord
from polar_cli.capture.ids import PromptView
from polar_cli.capture.record import Compactor, Expander
from polar_cli.trajectory import Build, per_request, prefix_merging
from polar_cli.trajectory.prefix_merging import Drift

SYSTEM = [10, 11, 12]


@dataclass
class Conversation:
    prompt: list[int]
    sampled: list[int] | None = None  # the answer the harness kept from this conversation's last call
    history: list[list[int]] = field(default_factory=list)


@dataclass
class Harness:
    records: list[CaptureRecord] = field(default_factory=list)
    conversations: list[Conversation] = field(default_factory=list)
    next_id: int = 1000
    next_unique: int = 400

    def unique(self) -> int:
        self.next_unique += 1
        return self.next_unique

    def sample(self, length: int, cut: bool) -> list[int]:
        ids = list(range(self.next_id, self.next_id + length))
        self.next_id += length
        return ids if cut else [*ids, E]

    def send(self, conv: Conversation, prompt: list[int], length: int, cut: bool) -> None:
        sampled = self.sample(length, cut)
        self.records.append(call(len(self.records), prompt, sampled))
        conv.prompt, conv.sampled = prompt, sampled

    def new(self, shared: int, length: int, cut: bool) -> None:
        conv = Conversation([*SYSTEM[:shared], self.unique(), A])
        self.conversations.append(conv)
        self.send(conv, conv.prompt, length, cut)

    def step(self, conv: Conversation, tool: int, length: int, cut: bool, drift: bool = False) -> None:
        assert conv.sampled is not None
        ended = conv.sampled[-1] == E
        body = conv.sampled[:-1] if ended else conv.sampled
        if drift:
            body = [self.unique(), *body[1:]]
        prompt = [*conv.prompt, *body, E, T, *range(20, 20 + tool), E, A]
        self.send(conv, prompt, length, cut)

    def retry(self, conv: Conversation, length: int, cut: bool) -> None:
        self.send(conv, conv.prompt, length, cut)

    def compact(self, conv: Conversation, shared: int, length: int, cut: bool) -> None:
        self.send(conv, [*SYSTEM[:shared], self.unique(), E, A], length, cut)

    def fail(self) -> None:
        self.records.append(failed(len(self.records)))


OPS = ["step", "step", "step", "new", "retry", "compact", "fail"]
op = st.tuples(
    st.sampled_from(OPS),
    st.integers(0, 5),  # which conversation
    st.integers(0, 3),  # shared system ids / tool length
    st.integers(1, 4),  # sampled length
    st.booleans(),  # cut by max tokens
)


drifting_op = st.tuples(
    st.sampled_from([*OPS, "drift"]), st.integers(0, 5), st.integers(0, 3), st.integers(1, 4), st.booleans()
)


def run(ops: Sequence[tuple[str, int, int, int, bool]]) -> list[CaptureRecord]:
    h = Harness()
    h.new(3, 2, False)
    for kind, which, k, length, cut in ops:
        conv = h.conversations[which % len(h.conversations)]
        if kind in ("step", "drift"):
            h.step(conv, k, length, cut, drift=kind == "drift")
        elif kind == "new":
            h.new(k, length, cut)
        elif kind == "retry":
            h.retry(conv, length, cut)
        elif kind == "compact":
            h.compact(conv, k, length, cut)
        else:
            h.fail()
    return h.records


def sampled_by_trace(build: Build, records: dict[int, CaptureRecord]) -> dict[int, list[int]]:
    """Check every trace's layout; return each call's sampled ids as found in the traces."""
    found: dict[int, list[int]] = {}
    for t in build.traces:
        covered = [0] * len(t.response_ids)
        last_seq = -1
        for seq, start, end in t.metadata["turns"]:
            assert seq > last_seq  # in order
            last_seq = seq
            assert seq not in found  # exactly once
            found[seq] = t.response_ids[start:end]
            assert t.loss_mask[start:end] == [1] * (end - start)
            assert t.response_logprobs[start:end] == records[seq].response_logprobs
            covered[start:end] = [1] * (end - start)
        assert t.loss_mask == covered  # nothing else is trainable
        assert all(lp == 0.0 for lp, m in zip(t.response_logprobs, t.loss_mask, strict=True) if not m)
        # the simulator renders answers exactly, so the trace reproduces its last call's token stream
        last = records[t.seqs[-1]]
        assert t.prompt_ids + t.response_ids == last.prompt_ids + last.response_ids
    return found


def as_views(records: list[CaptureRecord]) -> list[CaptureRecord]:
    """The records as `read_session_views` hands them back: stored compactly, rebuilt as prompt views."""
    compactor, expander = Compactor(), Expander(views=True)
    out = [expander.expand(compactor.compact(r)) for r in records]
    assert all(isinstance(r.prompt_ids, PromptView) for r in out)
    return out


def merge_both_ways(records: list[CaptureRecord], drift: Drift = "tolerant") -> Build:
    build = prefix_merging(records, drift=drift)
    assert prefix_merging(as_views(records), drift=drift) == build
    return build


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=40))
def test_every_sampled_id_is_trainable_exactly_once_in_order(ops: list[tuple[str, int, int, int, bool]]) -> None:
    records = run(ops)
    trainable = {r.seq: r for r in records if r.status == "ok"}
    merged = merge_both_ways(records)
    found = sampled_by_trace(merged, trainable)
    assert found == {seq: r.response_ids for seq, r in trainable.items()}
    assert sum(sum(t.loss_mask) for t in merged.traces) == sum(len(r.response_ids) for r in trainable.values())
    s = merged.stats
    assert s.completions_total == s.chains_total + s.completions_merged == len(trainable)
    assert s.chains_full + s.chains_truncated == s.chains_total == len(merged.traces)
    assert s.completions_skipped == len(records) - len(trainable)
    assert len(s.splits) == s.chains_total - 1
    assert s.turns_drifted == s.drift_tokens == 0
    assert merge_both_ways(records, "strict") == merged  # nothing drifts: strict changes nothing


@settings(max_examples=300, deadline=None)
@given(st.lists(drifting_op, max_size=40))
def test_strict_drift_keeps_every_trace_exact_and_drops_no_call(ops: list[tuple[str, int, int, int, bool]]) -> None:
    records = run(ops)
    trainable = {r.seq: r for r in records if r.status == "ok"}
    strict = merge_both_ways(records, "strict")
    # sampled_by_trace checks that prompt + response is exactly the last call's prompt + sampled ids
    assert sampled_by_trace(strict, trainable) == {seq: r.response_ids for seq, r in trainable.items()}
    assert strict.stats.turns_drifted == strict.stats.drift_tokens == 0
    tolerant = merge_both_ways(records, "tolerant")
    drifts = strict.stats.split_counts().get("drift", 0)
    # each drift op changes one id of one answer; tolerant merges there instead of splitting
    assert tolerant.stats.turns_drifted == tolerant.stats.drift_tokens == drifts
    assert tolerant.stats.chains_total == strict.stats.chains_total - drifts


@settings(max_examples=200, deadline=None)
@given(st.lists(op, max_size=40))
def test_per_request_and_prefix_merging_carry_the_same_sampled_ids(ops: list[tuple[str, int, int, int, bool]]) -> None:
    records = run(ops)
    trainable = {r.seq: r for r in records if r.status == "ok"}
    merged = sampled_by_trace(merge_both_ways(records), trainable)
    single = sampled_by_trace(per_request(records), trainable)
    assert merged == single


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 4), st.booleans(), st.booleans()), min_size=1, max_size=30))
def test_a_linear_session_merges_into_one_trace(steps: list[tuple[int, int, bool, bool]]) -> None:
    h = Harness()
    h.new(3, 2, False)
    conv = h.conversations[0]
    for tool, length, cut, fail_first in steps:
        if fail_first:
            h.fail()
        h.step(conv, tool, length, cut)
    build = prefix_merging(h.records)
    assert len(build.traces) == 1
    (trace,) = build.traces
    calls = [r for r in h.records if r.status == "ok"]
    assert trace.seqs == tuple(r.seq for r in calls)
    assert trace.prompt_ids == calls[0].prompt_ids
    assert trace.prompt_ids + trace.response_ids == calls[-1].prompt_ids + calls[-1].response_ids
    s = build.stats
    assert (s.chains_total, s.chains_full, s.completions_merged) == (1, 1, len(calls) - 1)
    assert s.splits == ()
