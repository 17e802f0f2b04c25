"""One session as the report sees it (its rows and its viewer page), whether a run directory or a serve state
directory holds it."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True, slots=True)
class Session:
    """One session: its rows (one per trace; one row for an error or a session without traces) and its file."""

    kind: str  # accepted | rejected | error | a serve status
    rows: list[dict[str, Any]]

    @property
    def head(self) -> dict[str, Any]:
        return self.rows[0]

    @property
    def ident(self) -> str:
        return str(self.head.get("session_id") or self.head.get("key") or "")

    @property
    def page(self) -> str:
        """Its viewer's file name: readable, and unique even when two ids differ only in characters cut out."""
        ident = self.ident
        salt = f"{self.kind}:{ident}:{self.head.get('key')}"
        safe = re.sub(r"[^A-Za-z0-9._-]+", "_", ident)[:80]
        return f"{safe}-{zlib.crc32(salt.encode()):08x}.html"

    def traces(self) -> list[dict[str, Any]]:
        """Each trace with its row's conversation: corpus rows carry them per row, error rows under ``traces``."""
        if self.kind == "error":
            return [{"trace": t, "messages": t.get("messages") or [], "tools": t.get("tools"), "lineage":
                     (t.get("metadata") or {}).get("lineage")} for t in self.head.get("traces") or []]  # fmt: skip
        return [r for r in self.rows if r.get("trace")]
