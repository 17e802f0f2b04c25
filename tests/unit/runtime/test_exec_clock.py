"""An exec's timeout runs on the clock it is given: one that stands still (the gateway paused for a weight sync)
holds the deadline back (`runtime.docker._pump`)."""

from __future__ import annotations

from polar_cli.runtime.docker import _pump
from polar_cli.runtime.execution import CappedBuffer


class Silent:
    """A socket on which the process never writes."""

    def __init__(self) -> None:
        self.reads = 0

    def settimeout(self, seconds: float) -> None:
        return None

    def recv(self, n: int) -> bytes:
        self.reads += 1
        raise TimeoutError


def test_the_deadline_waits_while_the_clock_stands_still() -> None:
    sock = Silent()
    ticks = iter([0.0] * 5 + [0.5, 1.0, 2.0, 3.0])  # five reads while paused, then time runs again
    assert _pump(sock, CappedBuffer(1024), deadline=1.5, clock=lambda: next(ticks)) == "deadline"
    assert sock.reads == 7  # at 0.0 five times, 0.5, 1.0; the clock read 2.0 ends it
