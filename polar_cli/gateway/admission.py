"""Which connections the server takes: caps on connections per process and per peer, and log lines that stay few
however hard a peer pushes (refusals and descriptor exhaustion are logged at most once per interval, with a count).

Rule 1: a connection over a cap is answered 503 (``overloaded``, in the generic error shape: no request was read
yet) and closed at once, so it holds its descriptor for microseconds, not for a timeout.
Rule 2: the process cap leaves room for the descriptors every admitted call needs besides its own socket (one
upstream connection, capture and journal files): by default half of ``RLIMIT_NOFILE`` (after a small reserve) goes
to inbound connections.
Rule 3: Unix-socket peers have no address; they count against the process cap only (gateway-only sandboxes reach
the server through one relay, so their connections all come from one place).
"""

from __future__ import annotations

import logging
import resource
import time
from collections import Counter
from dataclasses import dataclass

log = logging.getLogger("polar.server")

# descriptors kept aside before the split (stdio, listening sockets, logs, the event loop's own)
_RESERVED_FDS = 64
# at most one log line per this many seconds per kind of event a peer can cause at will
LOG_INTERVAL = 60.0


def default_max_connections() -> int:
    """Half the descriptors the process may open, after a reserve (Rule 2); at least 16."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(16, (soft - _RESERVED_FDS) // 2)


class RateLimitedLog:
    """One log line per ``interval`` at most; the next one says how many were held back."""

    def __init__(self, interval: float = LOG_INTERVAL) -> None:
        self.interval = interval
        self._last = float("-inf")
        self.held = 0

    def ready(self) -> int | None:
        """The count held back since the last line when a line may go out now, else None (and one more is held)."""
        now = time.monotonic()
        if now - self._last < self.interval:
            self.held += 1
            return None
        self._last, held, self.held = now, self.held, 0
        return held


@dataclass(frozen=True, slots=True)
class Verdict:
    admitted: bool
    peer: str | None  # the address counted against the per-peer cap; None for Unix-socket peers
    reason: str = ""


class Admission:
    """Counts the open connections of one server, per process and per peer, and admits or refuses new ones."""

    def __init__(self, max_connections: int, max_per_peer: int) -> None:
        self.max_connections = max_connections
        self.max_per_peer = max_per_peer
        self.open = 0
        self.refused = 0
        self.seen = 0  # every connection ever put to `admit`, taken or refused
        self._per_peer: Counter[str] = Counter()
        self._refusal_log = RateLimitedLog()

    def admit(self, peername: object) -> Verdict:
        peer = peername[0] if isinstance(peername, tuple) and peername else None
        self.seen += 1
        if self.open >= self.max_connections:
            return self._refuse(peer, f"{self.open} connections open, the process cap")
        if peer is not None and self._per_peer[peer] >= self.max_per_peer:
            return self._refuse(peer, f"{self._per_peer[peer]} connections open from {peer}, the per-peer cap")
        self.open += 1
        if peer is not None:
            self._per_peer[peer] += 1
        return Verdict(True, peer)

    def release(self, verdict: Verdict) -> None:
        if not verdict.admitted:
            return
        self.open -= 1
        if verdict.peer is not None:
            self._per_peer[verdict.peer] -= 1
            if not self._per_peer[verdict.peer]:
                del self._per_peer[verdict.peer]

    def _refuse(self, peer: str | None, reason: str) -> Verdict:
        self.refused += 1
        held = self._refusal_log.ready()
        if held is not None:
            more = f" ({held} more refused since the last line)" if held else ""
            log.warning("refusing a connection from %s: %s%s", peer or "a local socket", reason, more)
        return Verdict(False, peer, reason)


class _AcceptErrorFilter(logging.Filter):
    """asyncio logs a traceback each time ``accept()`` fails for want of descriptors (EMFILE), then pauses accepting
    for a second and retries: under a flood, a line a second forever. This keeps one line per `LOG_INTERVAL`, without
    the traceback, saying how many it held back."""

    def __init__(self) -> None:
        super().__init__()
        self._log = RateLimitedLog()

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("socket.accept() out of system resource"):
            return True
        held = self._log.ready()
        if held is None:
            return False
        error = record.exc_info[1] if record.exc_info else None
        record.msg = "accept() failed: out of descriptors or memory (%s); accepting pauses 1 s each time%s"
        record.args = (error, f" ({held} more since the last line)" if held else "")
        record.exc_info = record.exc_text = None
        return True


_ACCEPT_FILTER = _AcceptErrorFilter()


def quiet_accept_errors() -> None:
    """Install the rate limit on asyncio's accept-error log lines (idempotent)."""
    asyncio_log = logging.getLogger("asyncio")
    if _ACCEPT_FILTER not in asyncio_log.filters:
        asyncio_log.addFilter(_ACCEPT_FILTER)
