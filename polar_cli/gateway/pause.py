"""The model-call gate: holds model calls back while the inference server's weights are being replaced.

An RL trainer syncs new weights into the server between rollout steps. Around the sync it closes the gate
(`ModelCallGate.pause`), updates the weights, sets the new version (`set_weight_version`) and opens the gate again
(`resume`). While the gate is closed no new upstream call is sent: a call that arrives waits at the gate, and its
harness's connection simply stays open. The calls already sent upstream when the gate closes are either

- ``drain``: answered as usual; `pause` returns once they all are (``timeout`` bounds that wait), or
- ``abort``: cancelled at once (SGLang also gets ``POST /abort_request {"rid"}`` for each, to free its slots), and
  sent again once the gate opens, the same body under a fresh rid (``<rid>-r1``, ``-r2``, ...). The harness never
  sees the abort, so a session survives a weight update.

Every capture record carries the weight version that was current when its call was sent upstream (a replayed call:
when it was replayed). The gate only counts and signals; the handler (`handler.Gateway._send`) does the sending and
the replays. A harness that hangs up while its call waits at the gate or for its replay ends the call as any hang-up
does (record ``client_error``); nothing is sent upstream for it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal

log = logging.getLogger("polar.gateway")

PauseMode = Literal["drain", "abort"]
# sends the server's abort for one rid and returns the task doing it; None: the server does not abort by rid
AbortSender = Callable[[str], asyncio.Task[None] | None]


@dataclass(eq=False, slots=True)
class Flight:
    """One upstream call in flight: its task, its rid (None: the dialect sends none), and whether the gate aborted
    it (then the caller replays it)."""

    task: asyncio.Task[Any]
    rid: str | None
    aborted: bool = False


class ModelCallGate:
    """Counts the upstream calls in flight and holds new ones back while paused. Use it on one event loop."""

    def __init__(self, abort: AbortSender | None = None) -> None:
        self._abort = abort
        self._open = asyncio.Event()
        self._open.set()
        self.paused = False
        self.mode: PauseMode | None = None
        self.weight_version: str | None = None
        self._flights: set[Flight] = set()
        self._waiting = 0
        self._replays = 0
        # seconds the gate has been closed, over all pauses before the current one; and when the current one began
        self._paused_total = 0.0
        self._paused_since: float | None = None

    def set_weight_version(self, version: str | None) -> None:
        """The version stamped on the records of calls sent from now on."""
        self.weight_version = version

    async def pause(self, mode: PauseMode, timeout: float | None = None) -> int:
        """Close the gate; returns once the calls in flight are answered (drain) or cancelled (abort).

        Returns how many calls it waited for (drain) or aborted (abort). ``timeout`` bounds the wait (abort: for the
        cancelled calls to end and the aborts to be sent); past it TimeoutError is raised and the gate stays closed
        (a drain that timed out can be followed by an abort). A pause while paused drains or aborts the calls then in
        flight (usually none).
        """
        if mode not in ("drain", "abort"):
            raise ValueError(f"pause mode must be drain or abort, not {mode!r}")
        self.paused, self.mode = True, mode
        if self._paused_since is None:
            self._paused_since = time.monotonic()
        self._open.clear()
        flights = [f for f in self._flights if not f.task.done()]
        if mode == "drain":
            if flights:
                _, pending = await asyncio.wait([f.task for f in flights], timeout=timeout)
                if pending:
                    raise TimeoutError(f"{len(pending)} of {len(flights)} upstream calls unanswered after {timeout}s")
            log.info("gate closed: %d upstream calls drained", len(flights))
            return len(flights)
        aborted = []
        for flight in flights:
            flight.aborted = True  # before the caller wakes up to the cancellation
            if flight.task.cancel():
                aborted.append(flight)
            else:
                flight.aborted = False
        waits: list[asyncio.Task[Any]] = [f.task for f in aborted]
        if self._abort is not None:
            for flight in aborted:
                if flight.rid is not None and (task := self._abort(flight.rid)) is not None:
                    waits.append(task)
        if waits:
            _, pending = await asyncio.wait(waits, timeout=timeout)
            if pending:
                raise TimeoutError(f"aborting {len(aborted)} upstream calls took more than {timeout}s")
        log.info("gate closed: %d upstream calls aborted, to be replayed", len(aborted))
        return len(aborted)

    def resume(self) -> None:
        """Open the gate: the calls waiting at it and the aborted calls go upstream."""
        self.paused, self.mode = False, None
        if self._paused_since is not None:
            self._paused_total += time.monotonic() - self._paused_since
            self._paused_since = None
        self._open.set()

    def paused_seconds(self) -> float:
        """Seconds the gate has been closed so far, over every pause (safe to read from any thread)."""
        since = self._paused_since
        return self._paused_total + (time.monotonic() - since if since is not None else 0.0)

    def credited_clock(self) -> float:
        """`time.monotonic` stopped while the gate is closed: session deadlines on it are credited the time paused
        (a weight sync does not eat into a session's timeout)."""
        return time.monotonic() - self.paused_seconds()

    def status(self) -> dict[str, Any]:
        return {
            "paused": self.paused,
            "mode": self.mode,
            "in_flight": sum(1 for f in self._flights if not f.task.done()),
            "waiting": self._waiting,
            "replays_pending": self._replays,
            "weight_version": self.weight_version,
        }

    # -- the handler's side ---------------------------------------------------------------------------------------

    async def enter(self, *, replay: bool = False) -> None:
        """Return once the gate is open (at once when it is). A caller cancelled here is no longer counted."""
        if not self.paused:
            return
        if replay:
            self._replays += 1
        else:
            self._waiting += 1
        try:
            # a waiter woken by `resume` may run only after a later `pause` closed the gate again: look again
            while self.paused:
                await self._open.wait()
        finally:
            if replay:
                self._replays -= 1
            else:
                self._waiting -= 1

    def send(self, post: Coroutine[Any, Any, Any], rid: str | None) -> Flight:
        """Run one upstream call as its own task, counted in flight until it ends. Call right after `enter`."""
        task = asyncio.get_running_loop().create_task(post)
        flight = Flight(task, rid)
        self._flights.add(flight)

        def done(t: asyncio.Task[Any]) -> None:
            self._flights.discard(flight)
            if not t.cancelled():
                t.exception()  # retrieved: a call its harness left must not log "exception never retrieved"

        task.add_done_callback(done)
        return flight
