"""Capture records in, a trajectory corpus (JSONL or Parquet) out, all-or-nothing: what `polar merge-traces` runs.

Sessions are read one at a time, so peak memory follows the largest session, not the whole capture directory, and
read as prompt views (`capture.read_session_views`), so reading and merging cost what is on disk. Each session is
read, merged and written with the cyclic garbage collector paused (`gcpause`): per-id cost stays flat in session length.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from polar_cli.capture import CaptureRecord, read_session_views
from polar_cli.errors import ConfigError
from polar_cli.trajectory.gcpause import gc_paused
from polar_cli.trajectory.per_request import skip_reason
from polar_cli.trajectory.prefix_merging import DRIFT_POLICIES, Drift, detect_eot_token_id
from polar_cli.trajectory.stats import MergeStats
from polar_cli.trajectory.strategy import build_traces


class Strategy(StrEnum):
    per_request = "per_request"
    prefix_merging = "prefix_merging"


class DriftPolicy(StrEnum):
    """`prefix_merging.Drift` as CLI choices."""

    strict = "strict"
    tolerant = "tolerant"


@dataclass(frozen=True, slots=True)
class SessionStats:
    """One session's merge stats, by its id."""

    session_id: str
    stats: MergeStats

    def to_dict(self) -> dict[str, Any]:
        counts = self.stats.counts()
        del counts["sessions"]
        return {"session_id": self.session_id, **counts}


@dataclass(frozen=True, slots=True)
class MergeResult:
    out: Path
    rows: int
    strategy: str
    eot_token_id: int | None
    stats: MergeStats
    drift: Drift = "tolerant"
    per_session: tuple[SessionStats, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "out": str(self.out),
            "rows": self.rows,
            "strategy": self.strategy,
            "drift": self.drift,
            "eot_token_id": self.eot_token_id,
            **self.stats.to_dict(),
            "per_session": [s.to_dict() for s in self.per_session],
        }


def session_files(capture_dir: Path) -> list[Path]:
    """The capture directory's session files (one ``<session>.jsonl`` each), in a stable order."""
    if not capture_dir.is_dir():
        raise ConfigError(f"capture dir {capture_dir}: not a directory")
    files = sorted(capture_dir.glob("*.jsonl"))
    if not files:
        raise ConfigError(f"capture dir {capture_dir}: no session files (*.jsonl)")
    return files


def _sessions(files: list[Path]) -> Iterator[list[CaptureRecord]]:
    # one session in memory at a time: peak memory follows the largest session, not the whole capture
    for path in files:
        records = read_session_views(path)
        if records:
            yield records


def resolve_eot(files: list[Path]) -> int | None:
    """Detect the end-of-turn id from the first session that has a normally stopped call (usually the first).

    Raises `ConfigError` when calls could be merged but none reveals the id: the user has to pass it.
    """
    trainable = False
    for records in _sessions(files):
        eot = detect_eot_token_id(records)
        if eot is not None:
            return eot
        trainable = trainable or any(skip_reason(r) is None for r in records)
    if trainable:
        raise ConfigError(
            "cannot detect the end-of-turn token id: no call stopped normally (finish_reason stop or tool_calls "
            "without stop strings); pass --eot-token-id"
        )
    return None


def merge_capture(
    capture_dir: Path,
    strategy: Strategy,
    out: Path,
    eot_token_id: int | None = None,
    *,
    drift: Drift = "tolerant",
) -> MergeResult:
    """Build traces for every session of ``capture_dir`` and write them to ``out`` all-or-nothing.

    ``drift`` is prefix merging's policy for answers the template rendered differently (`prefix_merging` Rule 3).
    Raises `ConfigError` for bad usage. Returns with ``rows == 0`` and writes nothing when no call was trainable.
    """
    # the Parquet writer pulls in pyarrow; import it only when a command actually writes
    from polar_cli.corpus import CorpusWriter

    if out.suffix not in (".jsonl", ".parquet"):
        raise ConfigError(f"--out {out}: must end in .jsonl or .parquet")
    if not out.parent.is_dir():
        raise ConfigError(f"--out {out}: directory {out.parent} does not exist")
    if eot_token_id is not None and eot_token_id < 0:
        raise ConfigError(f"--eot-token-id {eot_token_id}: token ids are not negative")
    if drift not in DRIFT_POLICIES:
        raise ConfigError(f"--drift {drift}: expected one of {', '.join(DRIFT_POLICIES)}")
    files = session_files(capture_dir)
    eot = eot_token_id
    if strategy is Strategy.prefix_merging and eot is None:
        eot = resolve_eot(files)
    parts: list[SessionStats] = []
    writer = CorpusWriter(out)
    try:
        for path in files:
            with gc_paused():
                records = read_session_views(path)
                if not records:
                    continue
                build = build_traces(records, strategy, eot, drift)
                writer.extend(t.to_row() for t in build.traces)
            parts.append(SessionStats(records[0].session_id, build.stats))
        if writer.rows == 0:
            writer.abort()
        else:
            writer.commit()
    except BaseException:
        writer.abort()
        raise
    stats = MergeStats.combine(p.stats for p in parts)
    return MergeResult(out, writer.rows, strategy.value, eot, stats, drift, tuple(parts))
