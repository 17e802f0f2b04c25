from __future__ import annotations

from trajectory_helpers import A, E, T, call, failed

from polar_cli.trajectory import prefix_merging
from polar_cli.trajectory.report import Drift, drifts, explain


def test_explain_names_merged_calls_drift_splits_and_skips() -> None:
    p0 = [10, 11, A]
    p1 = [*p0, 20, 99, E, T, 30, E, A]  # renders [20 99] where the model sampled [20 21]
    compacted = [10, 88, A]
    records = [call(0, p0, [20, 21, E]), call(1, p1, [22, E]), failed(2), call(3, compacted, [23, E])]
    build = prefix_merging(records)
    assert drifts(build, records) == [Drift(seq=0, next_seq=1, at=1, sampled=(21,), rendered=(99,), tokens=1)]
    text = explain(build, records, decode=lambda ids: "".join(f"<{i}>" for i in ids))
    lines = text.splitlines()
    assert lines[0].startswith("trace 0: calls [0, 1], 3 prompt + 9 response ids (5 trainable)")
    assert "ended truncated (call 3: prefix_break" in lines[0]
    assert (
        lines[1] == "trace 1: calls [3], 3 prompt + 2 response ids (2 trainable), started by prefix_break, ended full"
    )
    assert "differs at id 1 (1 drift tokens): sampled '<21>' vs rendered '<99>'" in lines[2]
    assert lines[3].startswith("split: call 3 started trace 1: prefix_break")
    assert lines[4] == "  chain had '<11><3><20><99><2><5><30><2>', call has '<88><3>'"
    assert lines[5] == "skipped: call 2: status upstream_error"
