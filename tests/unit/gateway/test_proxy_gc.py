"""While `polar proxy` serves, start-up's objects are frozen out of the cyclic collector and young collections are
rarer; both are undone when it stops, and a reference cycle is still collected meanwhile."""

from __future__ import annotations

import gc
import weakref

from polar_cli.gateway.proxy import GC_THRESHOLD, _serving_gc


class _Node:
    def __init__(self) -> None:
        self.me = self


def test_serving_gc_is_undone_and_still_collects_cycles() -> None:
    before = gc.get_threshold()
    with _serving_gc():
        assert gc.get_threshold()[0] == GC_THRESHOLD
        assert gc.get_freeze_count() > 0
        node = _Node()
        ref = weakref.ref(node)
        del node
        gc.collect()
        assert ref() is None  # a cycle made while serving is collected
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
