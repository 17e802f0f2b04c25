"""The compactor compares prompts as 4-byte signed ints: its faster conversion gives `array("i")`'s bytes exactly, and
refuses what `array("i")` refuses."""

from __future__ import annotations

from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polar_cli.capture.record import _as_bytes

_EDGES = st.sampled_from([0, 1, 2**31 - 1, -1, -(2**31), 2**31, 2**32 - 1, 2**32, 2**63, -(2**40)])


@given(st.lists(st.integers(min_value=-(2**33), max_value=2**33) | _EDGES, max_size=40))
def test_the_bytes_are_the_signed_arrays_or_the_same_refusal(ids: list[int]) -> None:
    try:
        expected = array("i", ids).tobytes()
    except OverflowError:
        with pytest.raises(OverflowError):
            _as_bytes(ids)
        return
    assert _as_bytes(ids) == expected


def test_a_float_id_is_refused_as_before() -> None:
    with pytest.raises(TypeError):
        _as_bytes([1, 2.0])
