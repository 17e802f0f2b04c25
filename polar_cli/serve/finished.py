"""Finished tasks across the service, in the order they finished: the stream a trainer reads with a cursor
(``GET /v1/results?after=N&wait=S``) to take the next finished groups, whichever they are.

The cursor is a position in this order: a client sends back the ``cursor`` it was given and gets what finished
since. A restart rebuilds the order from the journal (by the time each task was marked done), so a cursor stays
good across one.
"""

from __future__ import annotations

import asyncio
import contextlib


class FinishedLog:
    def __init__(self) -> None:
        self.order: list[str] = []
        self._changed = asyncio.Event()

    def add(self, task_id: str) -> None:
        self.order.append(task_id)
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def after(self, cursor: int, wait: float, limit: int) -> tuple[list[str], int]:
        """Up to ``limit`` task ids finished after position ``cursor``, waiting up to ``wait`` seconds for one; and
        the cursor to send next."""
        cursor = max(0, min(cursor, len(self.order)))
        if cursor == len(self.order) and wait > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait)
        ids = self.order[cursor : cursor + limit]
        return ids, cursor + len(ids)
