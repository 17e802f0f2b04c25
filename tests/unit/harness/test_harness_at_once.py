"""INIT's steps that need nothing of each other go at once (`harness.session.at_once`): they overlap, every one ends
before a failure raises, and the first failure in the order given is the one that raises."""

from __future__ import annotations

import threading

import pytest

from polar_cli.errors import RuntimeFailure
from polar_cli.harness.session import at_once


def test_steps_overlap_and_all_end_before_the_first_failure_raises() -> None:
    both = threading.Barrier(2, timeout=5.0)  # breaks (and the test fails) unless the two steps run together
    ended: list[str] = []

    def probe() -> None:
        both.wait()
        ended.append("probe")
        raise RuntimeFailure("the relay did not answer")

    def strip() -> None:
        both.wait()
        ended.append("strip")
        raise RuntimeFailure("git refused")

    def files() -> None:
        ended.append("files")

    with pytest.raises(RuntimeFailure, match="relay"):
        at_once([probe, strip, files])
    assert sorted(ended) == ["files", "probe", "strip"]


def test_one_step_runs_on_the_callers_thread() -> None:
    seen: list[threading.Thread] = []
    at_once([lambda: seen.append(threading.current_thread())])
    at_once([])
    assert seen == [threading.current_thread()]
