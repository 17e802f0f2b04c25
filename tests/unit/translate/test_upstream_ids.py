"""The upstream decoder takes token ids only when every element is an id: an int in [0, 2**31), never a bool."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polar_cli.errors import TokenCaptureError
from polar_cli.translate.upstream import _ints, token_capture


def answer(prompt_ids: Any) -> dict[str, Any]:
    return {
        "choices": [
            {
                "message": {"role": "assistant", "content": "ok"},
                "logprobs": {"content": [{"logprob": -0.5}]},
                "finish_reason": "stop",
                "prompt_token_ids": prompt_ids,
                "response_token_ids": [9],
            }
        ]
    }


@pytest.mark.parametrize("bad", [2.5, "2", None, True, False, [2], {}, -1, 2**31, 2**32, 2**64 - 1, 2**70])
def test_one_bad_id_in_the_middle_refuses_the_answer(bad: Any) -> None:
    with pytest.raises(TokenCaptureError, match="no prompt token ids"):
        token_capture(answer([1, bad, 3]))


def test_good_ids_pass() -> None:
    assert token_capture(answer([1, 2, 2**31 - 1])).prompt_ids == [1, 2, 2**31 - 1]


_ELEMENT = st.integers(min_value=-(2**33), max_value=2**33) | st.sampled_from(
    [0, 2**31 - 1, 2**31, 2**32 - 1, 2**32, -(2**31), 2**63, 2**64 + 1, True, False, None, 1.0, -0.0, "1", [1]]
)


@given(st.lists(_ELEMENT, max_size=12))
def test_ids_pass_exactly_when_every_element_is_an_int_in_range(ids: list[Any]) -> None:
    expected = all(type(i) is int and 0 <= i < 2**31 for i in ids)
    assert (_ints(ids) is not None) == expected
