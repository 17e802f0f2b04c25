"""The service's queue of sessions to run: highest priority first, then submission order.

The node's stage pools pull from it as slots free up (`StagePools` takes it as its job source and is told to `feed`
again when work arrives), so a long queue never occupies a container before a slot is there for it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from polar_cli.node.feed import Feed
from polar_cli.node.pools import Job
from polar_cli.serve.stages import SessionJob


class SessionQueue(Feed[SessionJob]):
    """The queued sessions, highest priority first, then in the order they came (a retry ahead of its priority)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Job[SessionJob]]] = []
        self._order = itertools.count()

    def push(self, job: Job[SessionJob], priority: int, *, first: bool = False) -> None:
        """Queue ``job``; ``first``: ahead of everything of its priority (a retry)."""
        order = -next(self._order) if first else next(self._order)
        heapq.heappush(self._heap, (-priority, order, job))

    def remove(self, match: Callable[[Job[SessionJob]], bool]) -> list[Job[SessionJob]]:
        """Take out the jobs ``match`` picks; returns them."""
        taken = [entry[2] for entry in self._heap if match(entry[2])]
        if taken:
            self._heap = [entry for entry in self._heap if not match(entry[2])]
            heapq.heapify(self._heap)
        return taken

    def __len__(self) -> int:
        return len(self._heap)

    def depths(self) -> dict[str, int]:
        """Queued sessions per priority."""
        found: dict[str, int] = {}
        for priority, _order, _job in self._heap:
            found[str(-priority)] = found.get(str(-priority), 0) + 1
        return found

    def _pop(self) -> Job[SessionJob]:
        return heapq.heappop(self._heap)[2]
