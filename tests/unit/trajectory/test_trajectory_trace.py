from __future__ import annotations

import math
import re

import orjson
import pytest

from polar_cli.errors import TraceError
from polar_cli.trajectory import Trace


def make(ids: list[int], mask: list[int], logprobs: list) -> Trace:
    return Trace(
        session_id="s", seqs=(0,), prompt_ids=[1], response_ids=ids, loss_mask=mask, response_logprobs=logprobs
    )


def test_valid_trace_builds() -> None:
    t = make([5, 6, 7], [1, 0, 1], [-0.5, 0.0, -0.25])
    assert t.response_ids == [5, 6, 7]


@pytest.mark.parametrize(
    ("ids", "mask", "logprobs", "message"),
    [
        ([5, 6], [1], [-0.1, -0.2], "loss_mask has 1"),
        ([5, 6], [1, 1], [-0.1], "response_logprobs 1"),
        ([5, 6], [1, 2], [-0.1, -0.2], "other than 0 and 1: [2]"),
        ([5, 6], [1, 1], [-0.1, None], "no numeric logprob"),
        ([5, 6], [1, 0], [math.nan, 0.0], "NaN logprob"),
    ],
)
def test_invariants_are_checked_at_construction(ids: list[int], mask: list[int], logprobs: list, message: str) -> None:
    with pytest.raises(TraceError, match=re.escape(message)):
        make(ids, mask, logprobs)


def test_interstitial_slots_need_no_logprob_check() -> None:
    # mask-0 slots are not trainable: their value is the builder's business (0.0), not an invariant
    assert make([5, 6], [1, 0], [-0.1, 0.0]).loss_mask == [1, 0]


def test_to_row_is_plain_json_with_tools_as_a_json_string() -> None:
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    msg = {"role": "user", "content": "hi"}
    t = Trace(
        session_id="s",
        seqs=(3, 4),
        prompt_ids=[1],
        response_ids=[5],
        loss_mask=[1],
        response_logprobs=[-0.5],
        prompt_messages=[msg],
        response_messages=[{"role": "assistant", "content": "yo"}],
        tools=tools,
        finish_reason="stop",
        metadata={"chain": 0},
    )
    row = t.to_row()
    assert row["seqs"] == [3, 4]
    assert [m["role"] for m in row["messages"]] == ["user", "assistant"]
    assert orjson.loads(row["tools"]) == tools
    assert orjson.loads(orjson.dumps(row)) == row
