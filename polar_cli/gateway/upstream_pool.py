"""Several inference workers behind one `Upstream` (``engine.urls``): the gateway calls each worker directly.

- Session affinity: the first call of a gateway session binds the session to one worker, and every later call of it
  goes there, so the worker's prefix cache holds the conversation. A session is never moved: a worker that fails is an
  `UpstreamError` for its own sessions' calls, exactly as one URL is today (moving a conversation mid-way would change
  the cache and, with token-in, the server the ids were made for). `forget` drops a binding when the session closes.
- Least-load placement: a new session goes to the worker with the fewest calls in flight; ties: the fewest sessions
  bound, then the order of ``engine.urls``. A worker whose last call failed (no connection, no answer in time, broken
  HTTP, a 5xx) gets no new session for ``retry_after`` seconds while another is healthy; when none is, all are tried.
- Aborts: SGLang's ``POST /abort_request {"rid"}`` comes without a session (`handler.Gateway._send_abort`, the
  weight-sync gate of `pause`), so the pool remembers which worker got each rid (read from the call's body) and sends
  the abort there; a rid it does not know (evicted, never seen) is sent to every worker (SGLang ignores unknown rids).
- A call without a session that is not an abort (the start-up probes, `get`) goes to the least-loaded worker unbound.

No router sits in between: one that rebuilds the answer could drop the token fields the capture needs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

import orjson

from polar_cli.errors import UpstreamError
from polar_cli.gateway.upstream_client import UpstreamClient
from polar_cli.wire.http11 import Response

log = logging.getLogger("polar.gateway")

ABORT_PATH = "/abort_request"
# rids remembered for their abort: those in flight, and those cancelled (their abort follows at once); bounded, since a
# cancelled call whose abort never comes (a shutdown) would otherwise stay for good
MAX_RIDS = 16384
_RID_FIELD = b'"rid":"'


@dataclass(slots=True, eq=False)
class Worker:
    """One inference server of the pool and its counters (all touched on the event loop only)."""

    url: str
    client: UpstreamClient
    index: int
    in_flight: int = 0
    sessions: int = 0
    calls: int = 0
    failures: int = 0
    # the monotonic time of its last failed call, None while its last call succeeded
    failed_at: float | None = None
    # taken out of rotation (a weight load failed on it: `retire`): no session is placed on it again
    retired: str | None = None

    @property
    def healthy(self) -> bool:
        """Whether its last call succeeded (or it has had none)."""
        return self.failed_at is None


class UpstreamPool:
    """An `Upstream` over several servers of one model: session affinity, least-load placement, aborts by rid."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        timeout: float = 1800.0,
        connect_timeout: float = 10.0,
        api_key: str | None = None,
        retry_after: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not urls:
            raise ValueError("an upstream pool needs at least one URL")
        if len(set(urls)) != len(urls):
            raise ValueError(f"an upstream pool's URLs must differ: {list(urls)}")
        clients = [UpstreamClient(u, timeout=timeout, connect_timeout=connect_timeout, api_key=api_key) for u in urls]
        self.workers = [Worker(url, client, i) for i, (url, client) in enumerate(zip(urls, clients, strict=True))]
        # the first worker's URL: what a log line or a single-server caller names
        self.base_url = self.workers[0].url
        self.retry_after = retry_after
        self._clock = clock
        self._bound: dict[str, Worker] = {}
        self._rids: OrderedDict[str, Worker] = OrderedDict()

    @property
    def urls(self) -> list[str]:
        return [w.url for w in self.workers]

    # -- the Upstream protocol ---------------------------------------------------------------------------------------

    async def post_json(self, path: str, body: bytes, *, session: str | None = None) -> Response:
        if session is None and path == ABORT_PATH:
            return await self._abort(body)
        worker = self._worker(session)
        rid = request_id(body)
        if rid is not None:
            self._rids[rid] = worker
            self._rids.move_to_end(rid)
            while len(self._rids) > MAX_RIDS:
                self._rids.popitem(last=False)
        return await self._through(worker, lambda: worker.client.post_json(path, body), rid)

    async def get(self, path: str) -> Response:
        worker = self._place()
        return await self._through(worker, lambda: worker.client.get(path), None)

    async def close(self) -> None:
        for worker in self.workers:
            await worker.client.close()

    # -- sessions ----------------------------------------------------------------------------------------------------

    def forget(self, session: str) -> None:
        """The session closed: its worker no longer counts it (a later call under its id is placed afresh)."""
        worker = self._bound.pop(session, None)
        if worker is not None:
            worker.sessions -= 1

    def worker_of(self, session: str) -> str | None:
        """The URL of the worker ``session`` is bound to; None before its first call or after `forget`."""
        worker = self._bound.get(session)
        return worker.url if worker is not None else None

    def stats(self) -> dict[str, Worker]:
        """Per worker URL, a copy of its counters as they stand: calls in flight, sessions bound, calls made, failed
        calls, whether the last one succeeded (``healthy``)."""
        return {w.url: replace(w) for w in self.workers}

    def retire(self, url: str, reason: str) -> None:
        """Take the worker at ``url`` out of rotation: its sessions move to the others at their next call."""
        for worker in self.workers:
            if worker.url == url:
                worker.retired = reason

    def _worker(self, session: str | None) -> Worker:
        if session is None:
            return self._place()
        worker = self._bound.get(session)
        if worker is not None and worker.retired is not None:
            self.forget(session)
            worker = None
        if worker is None:
            worker = self._bound[session] = self._place()
            worker.sessions += 1
            log.debug("session %s on worker %s", session, worker.url)
        return worker

    def _place(self) -> Worker:
        """The least-loaded worker among those fit for new work (all of them when none is)."""
        now = self._clock()
        live = [w for w in self.workers if w.retired is None] or self.workers
        fit = [w for w in live if w.failed_at is None or now - w.failed_at >= self.retry_after]
        return min(fit or live, key=lambda w: (w.in_flight, w.sessions, w.index))

    # -- calls -------------------------------------------------------------------------------------------------------

    async def _through(self, worker: Worker, call: Callable[[], Awaitable[Response]], rid: str | None) -> Response:
        worker.in_flight += 1
        worker.calls += 1
        cancelled = False
        try:
            response = await call()
        except UpstreamError:
            self._failed(worker)
            raise
        except asyncio.CancelledError:
            cancelled = True  # the abort for its rid follows (hang-up, weight sync): keep where it went
            raise
        finally:
            worker.in_flight -= 1
            if rid is not None and not cancelled:
                self._rids.pop(rid, None)
        if response.status >= 500:
            self._failed(worker)
        else:
            worker.failed_at = None
        return response

    def _failed(self, worker: Worker) -> None:
        worker.failures += 1
        worker.failed_at = self._clock()

    async def _abort(self, body: bytes) -> Response:
        """``/abort_request`` to the worker that got its rid; to every worker when the rid is unknown."""
        rid = request_id(body)
        worker = self._rids.pop(rid, None) if rid is not None else None
        if worker is not None:
            return await self._through(worker, lambda: worker.client.post_json(ABORT_PATH, body), None)
        log.info("abort of %s: no worker known for it, sent to all %d", rid, len(self.workers))
        answers = await asyncio.gather(
            *(self._through(w, _poster(w, ABORT_PATH, body), None) for w in self.workers), return_exceptions=True
        )
        for answer in answers:
            if isinstance(answer, Response) and answer.status == 200:
                return answer
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
        first = answers[0]
        assert isinstance(first, Response)
        return first


def _poster(worker: Worker, path: str, body: bytes) -> Callable[[], Awaitable[Response]]:
    return lambda: worker.client.post_json(path, body)


def request_id(body: bytes) -> str | None:
    """The top-level ``rid`` of a JSON request body, or None.

    The gateway's bodies are compact orjson with ``rid`` at the top level, and the harness's text inside them is
    escaped (``\\"rid\\"``), so one ``"rid":"`` in the bytes is the rid: found without parsing a body of megabytes.
    Anything else (several, none in that form, an escape in the value) is parsed.
    """
    if b'"rid"' not in body:
        return None
    if body.count(_RID_FIELD) == 1:
        start = body.index(_RID_FIELD) + len(_RID_FIELD)
        end = body.find(b'"', start)
        if end >= start and b"\\" not in body[start:end]:
            return body[start:end].decode("utf-8", "replace")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    rid = data.get("rid") if isinstance(data, dict) else None
    return rid if isinstance(rid, str) else None
