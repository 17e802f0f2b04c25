"""Reading a run's JSONL files while they may still be written, and its rows as sessions: the one reading that every
view of a run shares (the report, the ATIF export, a serve state directory).

A session's rows are consecutive (one write, `generate/state.py` Rule 4), so `sessions` streams: only one session's
rows are in memory at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson


def read_rows(path: Path) -> Iterator[dict[str, Any]]:
    """Complete rows of a JSONL file that may be written as we read: a torn or half-flushed last line is skipped, a
    missing file has none."""
    if not path.exists():
        return
    with path.open("rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                return
            try:
                row = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(row, dict):
                yield row


def sessions(rows: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """Consecutive rows of one session (same ``key`` and ``session_id``) as one list."""
    group: list[dict[str, Any]] = []
    for row in rows:
        if group and (row.get("key"), row.get("session_id")) != (group[0].get("key"), group[0].get("session_id")):
            yield group
            group = []
        group.append(row)
    if group:
        yield group
