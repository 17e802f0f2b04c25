"""`polar export atif RUN_DIR`: every session of a run directory as one ATIF file, and an index of them.

The corpus is read one session at a time (its rows are written together, `generate/state.py` Rule 4), so memory
follows the largest session. Each file is written whole (temporary file, then rename); the index last, so a reader
that finds ``index.jsonl`` finds every file it names.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from polar_cli.corpus.reading import read_rows, sessions
from polar_cli.errors import ConfigError
from polar_cli.export.atif import session_to_atif
from polar_cli.generate.state import CORPUS, REJECTS

INDEX = "index.jsonl"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True, slots=True)
class ExportResult:
    out: Path
    written: int
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> sessions

    @property
    def index(self) -> Path:
        return self.out / INDEX


def export_atif(
    run_dir: Path, out: Path | None = None, *, include_rejects: bool = False, prompt_ids: bool = True
) -> ExportResult:
    """Write ``out/<session_id>.json`` (default ``out``: ``RUN_DIR/atif``) for every session of ``corpus.jsonl``
    (and of ``rejects.jsonl`` with ``include_rejects``) that has a trace, then ``out/index.jsonl``: one line per
    session, with the file it went to or why it has none."""
    sources = [run_dir / CORPUS] + ([run_dir / REJECTS] if include_rejects else [])
    if not sources[0].is_file():
        raise ConfigError(f"{run_dir} is not a run directory: it has no {CORPUS}")
    out = out if out is not None else run_dir / "atif"
    out.mkdir(parents=True, exist_ok=True)
    index: list[dict[str, Any]] = []
    skipped: dict[str, int] = {}
    written = 0
    for source in sources:
        if not source.is_file():
            continue
        for rows in sessions(read_rows(source)):
            entry = _entry(rows[0], source.name)
            try:
                doc = session_to_atif(rows, prompt_ids=prompt_ids)
            except ValueError as exc:
                doc, entry["skipped"] = None, f"incomplete: {exc}"
            if doc is None:
                reason = entry.setdefault("skipped", "no trace").split(":")[0]
                skipped[reason] = skipped.get(reason, 0) + 1
            else:
                name = f"{_UNSAFE.sub('_', str(rows[0].get('session_id')))}.json"
                _write_whole(out / name, orjson.dumps(doc))
                entry |= {"file": name, "steps": len(doc["steps"]), "traces": len(rows)}
                entry["subagent_trajectories"] = _count_embedded(doc)
                written += 1
            index.append(entry)
    _write_whole(out / INDEX, b"".join(orjson.dumps(e) + b"\n" for e in index))
    return ExportResult(out, written, skipped)


def _entry(row: Mapping[str, Any], source: str) -> dict[str, Any]:
    keys = ("key", "session_id", "instance_id", "harness", "status", "accepted", "reward")
    return {"source": source, **{k: row.get(k) for k in keys}}


def _count_embedded(doc: Mapping[str, Any]) -> int:
    subs = doc.get("subagent_trajectories") or []
    return len(subs) + sum(_count_embedded(s) for s in subs)


def _write_whole(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
