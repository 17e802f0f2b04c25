"""The collector pause around one session's read and merge: nested and threaded pauses end as they began."""

from __future__ import annotations

import gc
import threading

import pytest

from polar_cli.trajectory.gcpause import gc_paused


@pytest.fixture(autouse=True)
def collector_on() -> None:
    gc.enable()


def test_a_pause_turns_the_collector_off_and_back_on() -> None:
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_pauses_end_with_the_outermost() -> None:
    with gc_paused():
        with gc_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()
    gc.enable()


def test_an_exception_ends_the_pause() -> None:
    with pytest.raises(ValueError), gc_paused():
        raise ValueError("a broken session")
    assert gc.isenabled()


def test_pauses_from_threads_that_overlap_end_when_the_last_ends() -> None:
    inside, release = threading.Barrier(3), threading.Event()

    def pause() -> None:
        with gc_paused():
            inside.wait(5)
            release.wait(5)

    threads = [threading.Thread(target=pause) for _ in range(2)]
    for t in threads:
        t.start()
    inside.wait(5)
    assert not gc.isenabled()
    release.set()
    for t in threads:
        t.join(5)
    assert gc.isenabled()
