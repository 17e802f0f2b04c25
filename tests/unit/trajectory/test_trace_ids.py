"""Token ids in a trace are ints, every one: a float, string or null id is never handed to a trainer."""

from __future__ import annotations

from typing import Any

import pytest

from polar_cli.errors import TraceError
from polar_cli.trajectory import Trace


@pytest.mark.parametrize("bad", [2.0, "2", None, True, [2]])
@pytest.mark.parametrize("field", ["prompt_ids", "response_ids"])
def test_a_non_int_id_anywhere_breaks_the_trace(field: str, bad: Any) -> None:
    ids: dict[str, list[Any]] = {"prompt_ids": [1, 2, 3, 4], "response_ids": [5, 6, 7]}
    ids[field][1] = bad  # neither end: a check of the first and last only would miss it
    with pytest.raises(TraceError, match=f"{field} holds"):
        Trace("s", (0,), ids["prompt_ids"], ids["response_ids"], [1, 1, 1], [-0.1, -0.2, -0.3])


def test_int_ids_build() -> None:
    assert Trace("s", (0,), [1, 2], [3], [1], [-0.5]).response_ids == [3]
