"""The upstream decoder takes token ids only when every element is an id: an int in [0, 2**31), never a bool."""

from __future__ import annotations

from typing import Any

import pytest

from polar_cli.errors import TokenCaptureError
from polar_cli.translate.upstream import token_capture


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


@pytest.mark.parametrize("bad", [2.5, "2", None, True, [2], -1, 2**31, 2**70])
def test_one_bad_id_in_the_middle_refuses_the_answer(bad: Any) -> None:
    with pytest.raises(TokenCaptureError, match="no prompt token ids"):
        token_capture(answer([1, bad, 3]))


def test_good_ids_pass() -> None:
    assert token_capture(answer([1, 2, 2**31 - 1])).prompt_ids == [1, 2, 2**31 - 1]
