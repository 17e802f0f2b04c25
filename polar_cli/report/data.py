"""What the report shows, read from a run directory (or a `polar serve` state directory): pure reading, no HTML.

A run may still be going: every JSONL file is read up to its last complete line (a torn tail is what the writer is
writing now), summary.json may not exist yet, a session's last rows may not all be written. Nothing here writes.

- `figures`: the run's numbers, computed from state.jsonl by `generate.summary.summarize`, the function that writes
  summary.json, so the report's numbers are summary.json's.
- `iter_sessions`: each session as its rows (one per trace), in file order, streaming: the rows of a session are
  consecutive (one write, `generate.state` Rule 4), so only one session's token arrays are in memory at a time.
- `session_summary`: the light per-session record of the table and the charts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from polar_cli.corpus.reading import read_rows, sessions
from polar_cli.generate.state import CORPUS, ERRORS, REJECTS, RUN, STATE
from polar_cli.report.serve_dir import is_serve_dir, serve_figures, serve_sessions
from polar_cli.report.session import Session, read_json

STAGES = ("init", "ready_wait", "run", "postrun", "eval")


def is_run_dir(path: Path) -> bool:
    return any((path / name).exists() for name in (STATE, CORPUS, REJECTS, RUN))


def run_kind(path: Path) -> str:
    if is_serve_dir(path):
        return "serve"
    if is_run_dir(path):
        return "generate"
    raise FileNotFoundError(f"{path}: neither a run directory (state.jsonl, run.json) nor a serve state directory")


def figures(run_dir: Path) -> dict[str, Any]:
    """The run's numbers: summary.json's fields, computed now from state.jsonl (a live run has no summary yet)."""
    if run_kind(run_dir) == "serve":
        return serve_figures(run_dir)
    from polar_cli.generate.summary import summarize

    written = read_json(run_dir / "summary.json") or {}
    run = read_json(run_dir / RUN) or {}
    recipe = run.get("recipe") or {}
    segment = max((int(e.get("segment") or 0) for e in read_rows(run_dir / STATE)), default=0)
    data = summarize(
        run_dir,
        gpus=int(written.get("gpus") or 0),
        planned=int(written.get("planned") or 0),
        engine=str(written.get("engine") or (recipe.get("engine") or {}).get("kind") or ""),
        model=str(written.get("model") or run.get("model") or ""),
        segment=segment,
    )
    if written.get("gpus"):  # the GPU figures need the engine's GPU count, which only the finished run wrote
        data["gpus"] = written["gpus"]
    for key in ("segment_seconds", "outages", "cluster"):
        if key in written:
            data[key] = written[key]
    data["name"] = str(recipe.get("name") or run_dir.name)
    data["live"] = not (run_dir / "summary.json").exists() or _newer(run_dir / STATE, run_dir / "summary.json")
    data["read_at"] = time.time()
    data["kind"] = "generate"
    return data


def _newer(a: Path, b: Path) -> bool:
    try:
        return a.stat().st_mtime > b.stat().st_mtime + 1
    except OSError:
        return False


def iter_sessions(run_dir: Path) -> Iterator[Session]:
    """Every session of the run, accepted, then rejected, then the machinery's errors, as their rows."""
    if run_kind(run_dir) == "serve":
        yield from serve_sessions(run_dir)
        return
    for kind, name in (("accepted", CORPUS), ("rejected", REJECTS)):
        for rows in sessions(read_rows(run_dir / name)):
            yield Session(kind, rows)
    for row in read_rows(run_dir / ERRORS):
        yield Session("error", [row])


def session_summary(session: Session) -> dict[str, Any]:
    """The table's record of a session: what ran, the verdict, tokens and stage seconds (no token arrays)."""
    head = session.head
    stats = head.get("stats") or {}
    timing = head.get("timing") or head.get("timings") or {}
    traces = session.traces()
    trained = sum(sum(t["trace"].get("loss_mask") or ()) for t in traces)
    sampled = sum(len(t["trace"].get("response_ids") or ()) for t in traces)
    reason = str(head.get("reason") or "")
    return {
        "id": session.ident,
        "key": head.get("key"),
        "page": session.page,
        "kind": session.kind,
        "instance": head.get("instance_id"),
        "repo": head.get("repo") or "",
        "harness": head.get("harness") or "",
        "status": head.get("status") or "",
        "accepted": session.kind == "accepted" or bool(head.get("accepted")),
        "reason": reason.split(":")[0] if reason else "",
        "detail": reason[:300],
        "reward": head.get("reward"),
        "traces": len(traces),
        "calls": stats.get("model_calls"),
        "prompt_tokens": int(stats.get("prompt_tokens") or 0),
        "completion_tokens": int(stats.get("completion_tokens") or sampled),
        "trainable_tokens": int(stats.get("trainable_tokens") or 0) if "trainable_tokens" in stats else trained,
        "drifted": sum(len((t["trace"].get("metadata") or {}).get("turns_drifted") or ()) for t in traces),
        "timing": {k: float(v) for k, v in timing.items() if isinstance(v, int | float)},
        "finished_at": head.get("finished_at"),
    }


def find_session(run_dir: Path, wanted: str) -> Session | None:
    """The session named by its session id, its key, or its viewer's file name (first match)."""
    for session in iter_sessions(run_dir):
        head = session.head
        if wanted in (session.ident, head.get("key"), session.page, session.page.removesuffix(".html")):
            return session
    return None


def read_log(run_dir: Path, eval_report: Mapping[str, Any] | None, limit: int = 400_000) -> str | None:
    """The session's whole test log (``eval.log_path``, relative to the run directory), its tail past ``limit``."""
    if not eval_report:
        return None
    rel = eval_report.get("log_path")
    if isinstance(rel, str) and rel:
        path = (run_dir / rel).resolve()
        if path.is_file() and run_dir.resolve() in path.parents:
            data = path.read_bytes()
            text = data[-limit:].decode("utf-8", "replace")
            return text if len(data) <= limit else f"[... {len(data) - limit} bytes before cut ...]\n{text}"
    excerpt = eval_report.get("log_excerpt")
    return str(excerpt) if excerpt else None
