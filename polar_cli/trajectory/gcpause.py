"""Python's cyclic garbage collector paused while one session is read, merged and written.

Reading a long session makes millions of container objects (records, their dicts and id lists), and every
allocation counts towards a collection of the generations they sit in: a 400-call session paid ~40% more per id
than a 10-call one only in collections that find nothing (`scripts/bench_merge.py` "scaling"). What the reader and
the builders make holds no reference cycle, so reference counting frees a session once it is done; the pause ends
with the session, and a later collection finds whatever a cycle might still hold.

Pauses nest and may come from several threads: the collector runs again when the last one ends, if it ran before
the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_depth = 0
_was_enabled = False


@contextmanager
def gc_paused() -> Iterator[None]:
    global _depth, _was_enabled
    with _lock:
        if _depth == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _was_enabled:
                gc.enable()
