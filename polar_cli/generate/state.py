"""The run directory: the state of a `polar generate` run, safe against ``kill -9`` at any moment.

    OUT/
      run.json          what the run is (recipe, engine, model); a resumed run must match it
      recipe.yaml       the resolved recipe, every default spelled out
      state.jsonl       one line per finished session (key, verdict, tokens, timings) and per run segment
      corpus.jsonl      accepted rows, appended one at a time        corpus.parquet  derived at the end
      rejects.jsonl     rejected rows, with the reason
      errors.jsonl      sessions the machinery failed (engine, container, grader): not finished, retried next time
      capture/ artifacts/ logs/

The protocol (one writer, the node's event loop thread):

- Rule 1: a session's row is appended (one write(2) of one whole line) BEFORE its state line. A finished key is
  therefore always backed by a row.
- Rule 2: opening the run cuts a torn last line off every JSONL file (`corpus.writer.repair_tail`): a kill during a
  write loses only the line being written, and no reader ever sees half a row.
- Rule 3: a kill between the row and its state line leaves that row as the last line of its file; opening the run
  adds the missing state line from the row itself. So every row written before the kill is kept, and its session is
  never run again (no duplicates).
- Rule 4: an accepted or rejected session is one row per trace (`rows.segment_rows`), all written in one write(2);
  each row says ``trace_index`` of ``trace_count``. A kill that tore the group leaves a last row whose index is not
  the last: opening the run cuts the group's rows off, and the session runs again (never half a session).

A resumed run skips every key in the state file. The state file is small (no token arrays), so resuming a run with a
large corpus never reads the corpus.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from polar_cli.config import Recipe, recipe_yaml
from polar_cli.corpus.writer import JsonlAppender, read_jsonl
from polar_cli.errors import ConfigError, DiskFull
from polar_cli.generate.rows import segment_rows

STATE = "state.jsonl"
CORPUS = "corpus.jsonl"
REJECTS = "rejects.jsonl"
ERRORS = "errors.jsonl"
RUN = "run.json"
# what defines a corpus: who answered (a scripted policy, or a served model, checked by name once it is known) and
# how trajectories are built. A resumed run may change anything else (engine launch, concurrency, timeouts, ...).
IDENTITY = ("policy", "builder.strategy")
_TAIL_CHUNK = 1 << 16


def session_key(instance_id: str, harness: str, attempt: int) -> str:
    return f"{instance_id}::{harness}::{attempt}"


def state_entry(row: Mapping[str, Any], segment: int, t: float) -> dict[str, Any]:
    """The state line of a row: enough to resume and to summarise, without the heavy fields."""
    stats = row.get("stats") or {}
    return {
        "type": "session",
        "key": row["key"],
        "segment": segment,
        "t": t,
        "instance_id": row["instance_id"],
        "repo": row["repo"],
        # swe or harbor (rows written before Harbor tasks carry none: swe)
        "task_kind": row.get("task_kind") or "swe",
        "harness": row["harness"],
        "attempt": row["attempt"],
        "accepted": bool(row["accepted"]),
        "status": row["status"],
        "reason": row.get("reason"),
        "calls": stats.get("model_calls", 0),
        "prompt_tokens": stats.get("prompt_tokens", 0),
        "completion_tokens": stats.get("completion_tokens", 0),
        "trainable_tokens": stats.get("trainable_tokens", 0),
        "merge": {k: stats[k] for k in _MERGE if k in stats},
        # the kinds of history/network lookups the agent made (`lookups`), for the summary's count
        "lookups": sorted({str(lookup.get("kind")) for lookup in row.get("lookups") or ()}),
        "timing": row.get("timing") or {},
        # the cluster node that ran it (None on one box)
        "node_id": row.get("node_id"),
    }


# the merge counts the summary adds up (rows written before they existed lack some)
MERGE_COUNTS = (
    "completions_total",
    "completions_merged",
    "conversations",
    "turns_drifted",
    "drift_tokens",
    "token_in_calls",
    "compactions",
    "subagents",
)
_MERGE = (*MERGE_COUNTS, "split_counts")


def last_row(path: Path) -> dict[str, Any] | None:
    """The last complete row of a JSONL file, reading only its tail."""
    if not path.exists():
        return None
    with path.open("rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        if end == 0:
            return None
        data = b""
        pos = end
        # grow the window until it holds a newline before the last line (or the file start)
        while pos > 0 and data.count(b"\n") < 2:
            pos = max(0, pos - _TAIL_CHUNK)
            fh.seek(pos)
            data = fh.read(end - pos)
    lines = data.rstrip(b"\n").split(b"\n")
    try:
        row = orjson.loads(lines[-1])
    except orjson.JSONDecodeError:
        return None
    return row if isinstance(row, dict) else None


def _identity(recipe: Mapping[str, Any]) -> dict[str, Any]:
    kind = recipe["engine"]["kind"]
    return {
        "policy": kind if kind in ("gold", "noop") else "served model",
        "builder.strategy": recipe["builder"]["strategy"],
    }


@dataclass(frozen=True, slots=True)
class Verdict:
    """Where a finished session's row goes."""

    kind: str  # "accepted" | "rejected" | "error"
    row: dict[str, Any]


class RunState:
    """An open run directory: finished keys, and the appenders that keep Rules 1-3."""

    def __init__(self, out: Path, recipe: Recipe, *, fsync: bool = False) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        for sub in ("capture", "artifacts", "logs"):
            (out / sub).mkdir(exist_ok=True)
        self._check_identity(recipe)
        self.state = JsonlAppender(out / STATE, fsync=fsync)
        self.corpus = JsonlAppender(out / CORPUS, fsync=fsync)
        self.rejects = JsonlAppender(out / REJECTS, fsync=fsync)
        self.errors = JsonlAppender(out / ERRORS, fsync=fsync)
        entries = list(read_jsonl(out / STATE))
        self.finished: dict[str, dict[str, Any]] = {e["key"]: e for e in entries if e.get("type") == "session"}
        self.segment = 1 + max((int(e["segment"]) for e in entries if e.get("type") == "segment"), default=0)
        self.recovered = self._recover()
        self.state.append({"type": "segment", "segment": self.segment, "t": time.time(), "pid": os.getpid()})
        self.errors_this_segment = 0

    def _check_identity(self, recipe: Recipe) -> None:
        dump = recipe.model_dump(mode="json")
        path = self.out / RUN
        if path.exists():
            previous = orjson.loads(path.read_bytes()).get("recipe") or {}
            before, now = _identity(previous), _identity(dump)
            changed = [f"{k}: {before[k]!r} -> {now[k]!r}" for k in IDENTITY if before[k] != now[k]]
            if changed:
                raise ConfigError(
                    f"run directory {self.out} holds a run with another engine or builder ({'; '.join(changed)}); "
                    "use another --out, or the same settings to resume it"
                )
        else:
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(orjson.dumps({"created": time.time(), "recipe": dump}, option=orjson.OPT_INDENT_2))
            os.replace(tmp, path)
        (self.out / "recipe.yaml").write_text(recipe_yaml(recipe))

    def check_model(self, model: str) -> None:
        """The served model must be the one the run's rows came from (recorded by the run's first segment)."""
        path = self.out / RUN
        data = orjson.loads(path.read_bytes())
        recorded = data.get("model")
        if recorded is None:
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(orjson.dumps({**data, "model": model}, option=orjson.OPT_INDENT_2))
            os.replace(tmp, path)
        elif recorded != model:
            raise ConfigError(
                f"run directory {self.out} holds rows of model {recorded!r}, but the engine serves {model!r}; "
                "use another --out, or serve the same model to resume it"
            )

    def _recover(self) -> int:
        """Rule 3: state lines for rows written just before a kill (Rule 4: a session whose segment rows a kill
        tore is cut back off, and runs again). Returns how many state lines were added."""
        added = 0
        for appender in (self.corpus, self.rejects):
            row = last_row(appender.path)
            if row is None or row.get("key") in self.finished:
                continue
            index, count = int(row.get("trace_index") or 0), int(row.get("trace_count") or 0)
            if index < count - 1:
                appender.drop_last(index + 1)
                continue
            when = float(row.get("finished_at") or time.time())
            entry = state_entry(row, int(row.get("segment") or 0), when)
            self.state.append(entry)
            self.finished[entry["key"]] = entry
            added += 1
        return added

    def record(self, verdict: Verdict) -> None:
        """Rule 1: the rows (one per trace, in one write: `rows.segment_rows`), then for finished sessions its state
        line. An error keeps one row per session: it is not training data, and the next run tries it again."""
        row = {**verdict.row, "segment": self.segment, "finished_at": time.time()}
        if verdict.kind == "error":
            self.errors.append(row)
            self.errors_this_segment += 1
            return
        (self.corpus if verdict.kind == "accepted" else self.rejects).append_many(segment_rows(row))
        entry = state_entry(row, self.segment, row["finished_at"])
        self.state.append(entry)
        self.finished[entry["key"]] = entry

    def close(self, *, interrupted: bool = False) -> None:
        try:
            self.state.append(
                {"type": "segment_end", "segment": self.segment, "t": time.time(), "interrupted": interrupted}
            )
        except DiskFull:  # the segment then ends at its last session (`segments`); nothing is torn
            pass
        finally:
            for appender in (self.state, self.corpus, self.rejects, self.errors):
                appender.close()


def segments(out: Path) -> Iterator[tuple[int, float, float]]:
    """(segment, start, end) wall-clock times of each run segment; a killed segment ends at its last session."""
    start: dict[int, float] = {}
    end: dict[int, float] = {}
    for e in read_jsonl(out / STATE) if (out / STATE).exists() else ():
        seg, t = int(e.get("segment") or 0), float(e.get("t") or 0.0)
        if e.get("type") == "segment":
            start[seg] = t
            end.setdefault(seg, t)
        elif seg in start:
            end[seg] = max(end[seg], t)
    for seg in sorted(start):
        yield seg, start[seg], end[seg]
