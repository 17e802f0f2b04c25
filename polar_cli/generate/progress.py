"""Progress of a run: a rich live view on a terminal, plain log lines for cron (``--no-progress``).

The live view shows the sessions in each stage (init, ready, running, postrun), finished, accepted and an ETA from
this segment's throughput. Per-session lines always go to the log (``logs/generate.log`` in the run directory), so a
cron job's log tells the same story as the live view.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from polar_cli.node.pools import Snapshot

log = logging.getLogger("polar.generate")


def eta_seconds(done_now: int, remaining: int, elapsed: float) -> float | None:
    """Remaining sessions at this segment's rate; None until one session finished."""
    if done_now <= 0 or elapsed <= 0:
        return None
    return remaining * elapsed / done_now


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "--:--"
    s = int(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Progress:
    """Counts of one run segment; `renderable` draws them, `session_done` logs one finished session."""

    def __init__(self, total: int, already: int, accepted_before: int) -> None:
        self.total = total
        self.already = already
        self.accepted = accepted_before
        self.rejected = 0
        self.errors = 0
        self.done_now = 0
        self.snapshot = Snapshot(False, 0, 0, 0, 0, 0, 0, 0)
        self.started = time.monotonic()

    def update(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def session_done(self, kind: str, row: dict[str, Any]) -> None:
        if kind == "error":
            self.errors += 1
        else:
            self.done_now += 1
            if kind == "accepted":
                self.accepted += 1
            else:
                self.rejected += 1
        timing = row.get("timing") or {}
        log.info(
            "%s %s: %s%s (init %.1fs, ready %.1fs, run %.1fs, postrun %.1fs) [%d/%d]",
            row["key"],
            kind,
            row["status"],
            f", {row['reason']}" if row.get("reason") else "",
            timing.get("init", 0.0),
            timing.get("ready_wait", 0.0),
            timing.get("run", 0.0),
            timing.get("postrun", 0.0),
            self.already + self.done_now,
            self.total,
        )

    def eta(self) -> float | None:
        remaining = self.total - self.already - self.done_now
        return eta_seconds(self.done_now, remaining, time.monotonic() - self.started)

    def renderable(self) -> Any:
        """Two lines that fit an 80-column terminal: a bar with the verdicts, then the stages and the clock."""
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        s = self.snapshot
        finished = self.already + self.done_now
        top = Table.grid(padding=(0, 1))
        top.add_row(
            Text("polar generate", style="bold"),
            ProgressBar(total=max(self.total, 1), completed=finished, width=24),
            Text(f"{finished}/{self.total}  accepted {self.accepted}  rejected {self.rejected}  errors {self.errors}"),
        )
        stages = (
            f"init {s.init}  ready {s.ready}  running {s.running}  postrun {s.postrun}    "
            f"elapsed {_clock(time.monotonic() - self.started)}  ETA {_clock(self.eta())}"
        )
        return Group(top, Text(stages))

    def __rich__(self) -> Any:
        return self.renderable()
