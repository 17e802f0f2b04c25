"""Callback deliveries: a finished task's TaskResult POSTed to its ``callback_url``, at least once.

Each delivery carries ``Idempotency-Key: <task_id>`` (a receiver that sees a key twice has the result already), is
retried with exponential backoff (``service.callback``: ``backoff`` doubled per failure up to ``max_backoff``,
``attempts`` in all, ``timeout`` per attempt), and every attempt is journaled: a 2xx marks the task delivered, the
last failure marks it failed (shown in /v1/status; the result stays served). After a restart the journal's
undelivered tasks are delivered again from the attempt they reached.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import orjson

from polar_cli.serve.config import CallbackConfig

log = logging.getLogger("polar.serve")

Payload = Callable[[], Awaitable[dict[str, Any]]]
Journal = Callable[[str, int, bool, str | None], None]


class Deliveries:
    """The deliveries under way, one asyncio task each."""

    def __init__(self, config: CallbackConfig, journal: Journal) -> None:
        self.config = config
        self.journal = journal
        self.pending: dict[str, asyncio.Task[None]] = {}
        # the last error of each delivery still being retried, and of each that ran out of attempts
        self.errors: dict[str, str] = {}
        self.failed: dict[str, str] = {}
        self.delivered = 0
        self._client: httpx.AsyncClient | None = None

    def start(self, task_id: str, url: str, payload: Payload, *, attempts_made: int = 0) -> None:
        if task_id in self.pending:
            return
        if attempts_made >= self.config.attempts:
            self.failed.setdefault(task_id, "no attempts left")
            return
        task = asyncio.get_running_loop().create_task(self._deliver(task_id, url, payload, attempts_made))
        self.pending[task_id] = task
        task.add_done_callback(lambda _t: self.pending.pop(task_id, None))

    async def _deliver(self, task_id: str, url: str, payload: Payload, made: int) -> None:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.config.timeout, trust_env=False)
        body = orjson.dumps(await payload())
        headers = {"content-type": "application/json", "idempotency-key": task_id}
        for attempt in range(made + 1, self.config.attempts + 1):
            if attempt > 1:
                await asyncio.sleep(min(self.config.backoff * 2 ** (attempt - 2), self.config.max_backoff))
            try:
                response = await self._client.post(url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                if 200 <= response.status_code < 300:
                    self.journal(task_id, attempt, True, None)
                    self.errors.pop(task_id, None)
                    self.delivered += 1
                    return
                error = f"HTTP {response.status_code}"
            log.info("task %s: callback attempt %d to %s failed: %s", task_id, attempt, url, error)
            self.journal(task_id, attempt, False, error)
            self.errors[task_id] = f"attempt {attempt}: {error}"
        self.failed[task_id] = self.errors.pop(task_id, "failed")
        log.warning("task %s: callback to %s failed %d times; the result stays served", task_id, url, attempt)

    async def close(self) -> None:
        for task in list(self.pending.values()):
            task.cancel()
        if self.pending:
            await asyncio.wait(list(self.pending.values()), timeout=5)
        if self._client is not None:
            await self._client.aclose()
            self._client = None
