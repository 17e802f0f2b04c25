"""Watching what a run depends on (the inference server, the Docker engine): pause on an outage, recover, or give up.

A `Watch` polls one dependency. After ``failures`` failed checks in a row (or at once, when the check says the
dependency is gone for good, such as a launched server whose process exited) the dependency is *down*: the `Outages`
gate closes, so the stage pools start no INIT and no RUN, and ``on_down`` ends the sessions in flight as errors (never
rejects: a session the machinery cut short is not a verdict on the agent). Then the watch recovers: ``recover`` (a
restart of a launched server, with bounded backoff) or waiting for the dependency to answer again, for at most
``give_up_after`` seconds. Once it answers, ``on_up`` runs (removing containers the outage orphaned) and the gate
opens. A dependency that does not come back raises `DependencyLost`, one line the run exits 1 with.

``Outages.epoch`` counts the outages so far: a session that began before the current epoch was in flight during one,
and the run may run it again (`generate.run`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from polar_cli.errors import PolarError

log = logging.getLogger("polar.health")

# a check's answer: None when healthy, else what is wrong; `Gone` when waiting cannot help
Check = Callable[[], Awaitable["str | Gone | None"]]


@dataclass(frozen=True, slots=True)
class Gone:
    """A failed check that needs no confirmation (the process exited, the socket is gone)."""

    reason: str


class DependencyLost(PolarError):
    """A dependency went down and did not come back: the run cannot go on."""


@dataclass
class Outages:
    """What is down now, how many outages there have been, and the gate the stage pools wait on."""

    down: set[str] = field(default_factory=set)
    epoch: int = 0
    history: list[dict[str, object]] = field(default_factory=list)
    # called whenever the gate opens, so the pools dispatch again
    on_open: Callable[[], None] | None = None
    # called when an outage is declared, with the monotonic time its failing began (a check interval before the
    # first failed check): sessions that failed since then failed because of it
    on_outage: Callable[[float], None] | None = None

    def open(self) -> bool:
        return not self.down

    def went_down(self, name: str, reason: str, since: float | None = None) -> None:
        self.down.add(name)
        self.epoch += 1
        self.history.append({"dependency": name, "reason": reason, "down_at": time.time(), "up_at": None})
        if self.on_outage is not None:
            self.on_outage(time.monotonic() if since is None else since)

    def came_back(self, name: str, how: str) -> None:
        self.down.discard(name)
        for entry in reversed(self.history):
            if entry["dependency"] == name and entry["up_at"] is None:
                entry["up_at"] = time.time()
                entry["recovered_by"] = how
                break
        if self.open() and self.on_open is not None:
            self.on_open()


@dataclass
class Watch:
    """Polls ``check`` every ``interval`` s; handles an outage as the module docstring says."""

    name: str
    check: Check
    outages: Outages
    interval: float = 5.0
    failures: int = 3
    give_up_after: float = 900.0
    # restarts the dependency and returns once it answers (raises when it cannot); None: wait for it to come back
    recover: Callable[[], Awaitable[str]] | None = None
    on_down: Callable[[str], Awaitable[None]] | None = None
    on_up: Callable[[], Awaitable[None]] | None = None
    clock: Callable[[], float] = time.monotonic
    stopped: bool = False

    def stop(self) -> None:
        """End `run` at its next step (cancelling alone is not enough: a cancellation that lands as an executor
        call finishes can be lost in ``asyncio.wait_for`` before Python 3.12)."""
        self.stopped = True

    async def run(self) -> None:
        """Watch until stopped or cancelled; raises `DependencyLost` when the dependency does not come back."""
        failed = 0
        since = self.clock()
        while not self.stopped:
            await asyncio.sleep(self.interval)
            answer = await self._check()
            if answer is None:
                failed = 0
                continue
            failed += 1
            if failed == 1:
                since = self.clock() - self.interval
            gone = isinstance(answer, Gone)
            reason = answer.reason if isinstance(answer, Gone) else answer
            if not gone and failed < self.failures:
                log.info("%s check failed (%d/%d): %s", self.name, failed, self.failures, reason)
                continue
            await self._outage(reason, since)
            failed = 0

    async def _check(self) -> str | Gone | None:
        try:
            return await self.check()
        except Exception as exc:  # a check that breaks is a failed check, not a crash of the run
            return f"{type(exc).__name__}: {exc}"

    async def _outage(self, reason: str, since: float) -> None:
        log.warning(
            "%s is down (%s): no new session starts; sessions in flight end as errors to retry", self.name, reason
        )
        self.outages.went_down(self.name, reason, since)
        if self.on_down is not None:
            await self.on_down(reason)
        how = await self._recover(reason)
        if self.on_up is not None:
            await self.on_up()
        log.warning("%s is back (%s): sessions start again", self.name, how)
        self.outages.came_back(self.name, how)

    async def _recover(self, reason: str) -> str:
        if self.recover is not None:
            return await self.recover()
        start = self.clock()
        while self.clock() - start < self.give_up_after and not self.stopped:
            await asyncio.sleep(self.interval)
            if await self._check() is None:
                return f"answering again after {self.clock() - start:.0f} s"
        raise DependencyLost(
            f"{self.name} stopped answering ({reason}) and did not come back within {self.give_up_after:g} s"
        )


async def restart_with_backoff(
    name: str, restart: Callable[[], Awaitable[None]], *, attempts: int, backoff: float, max_backoff: float = 300.0
) -> str:
    """Call ``restart`` up to ``attempts`` times, waiting ``backoff`` s before the first try and doubling it (at most
    ``max_backoff``) after each failure; raises `DependencyLost` naming the last failure when none succeeded."""
    if attempts < 1:
        raise DependencyLost(f"{name} went down and restarts are off (engine.restarts: 0)")
    delay = backoff
    last = ""
    for attempt in range(1, attempts + 1):
        await asyncio.sleep(delay)
        log.warning("%s: restart %d/%d", name, attempt, attempts)
        try:
            await restart()
            return f"restarted (try {attempt}/{attempts})"
        except Exception as exc:
            last = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            log.warning("%s: restart %d/%d failed: %s", name, attempt, attempts, last)
        delay = min(delay * 2, max_backoff)
    raise DependencyLost(f"{name} went down and {attempts} restart(s) failed; the last: {last}")
