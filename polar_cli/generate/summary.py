"""The run's summary: attempts, acceptance per harness and per repo, tokens, merge stats, sessions whose agent
reached for git history or the network (`lookups`), wall time and GPU-hours.

Computed from the state file alone (every segment of a resumed run counts, no corpus row is read), written to
summary.json and shown as a rich table. GPU-hours are wall time x the engine's GPUs (the GPUs are held for the whole
run, busy or not), so "accepted per GPU-hour" is the cost figure that matters on a rented box.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson

from polar_cli.corpus.writer import read_jsonl
from polar_cli.generate.state import ERRORS, MERGE_COUNTS, STATE, segments
from polar_cli.trajectory.stats import merge_rate


def _rate(accepted: int, attempts: int) -> float | None:
    return round(accepted / attempts, 4) if attempts else None


def _groups(entries: Iterable[Mapping[str, Any]], field: str) -> dict[str, dict[str, Any]]:
    attempts: Counter[str] = Counter()
    accepted: Counter[str] = Counter()
    for e in entries:
        attempts[e[field]] += 1
        accepted[e[field]] += bool(e["accepted"])
    return {
        name: {"attempts": attempts[name], "accepted": accepted[name], "acceptance_rate": _rate(accepted[name], n)}
        for name, n in sorted(attempts.items())
    }


def _merge(entries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    totals: Counter[str] = Counter()
    splits: Counter[str] = Counter()
    sessions = 0
    for e in entries:
        merge = e.get("merge")
        if not merge:  # a state line written before merge stats were kept
            continue
        sessions += 1
        totals.update({k: int(merge.get(k) or 0) for k in MERGE_COUNTS})
        splits.update(merge.get("split_counts") or {})
    return {
        "sessions": sessions,
        **{k: totals[k] for k in MERGE_COUNTS},
        "merge_rate": merge_rate(totals["completions_merged"], totals["completions_total"], totals["conversations"]),
        "splits": {kind: n for kind, n in sorted(splits.items()) if n},
    }


def _lookups(entries: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Sessions whose agent reached for git history or the network (`lookups`), and how many were accepted."""
    flagged = [e for e in entries if e.get("lookups")]
    return {
        "sessions": len(flagged),
        "accepted": sum(bool(e["accepted"]) for e in flagged),
        "history": sum("history" in e["lookups"] for e in flagged),
        "network": sum("network" in e["lookups"] for e in flagged),
    }


def summarize(out: Path, *, gpus: int, planned: int, engine: str, model: str, segment: int) -> dict[str, Any]:
    """summary.json's content for the run directory ``out``."""
    entries = [e for e in read_jsonl(out / STATE) if e.get("type") == "session"] if (out / STATE).exists() else []
    attempts = len(entries)
    accepted = sum(bool(e["accepted"]) for e in entries)
    wall = sum(end - start for _seg, start, end in segments(out))
    gpu_hours = wall / 3600 * gpus
    errors = list(read_jsonl(out / ERRORS)) if (out / ERRORS).exists() else []
    done = {e["key"] for e in entries}
    stage_sums: dict[str, float] = defaultdict(float)
    for e in entries:
        for stage, seconds in (e.get("timing") or {}).items():
            stage_sums[stage] += float(seconds)
    return {
        "run_dir": str(out),
        "engine": engine,
        "model": model,
        "planned": planned,
        "attempts": attempts,
        "accepted": accepted,
        "rejected": attempts - accepted,
        "acceptance_rate": _rate(accepted, attempts),
        "pending": max(planned - attempts, 0),
        # errors of this segment whose session is still unfinished (the exit code's business), and those an in-run
        # retry finished (an outage's: `generate.watches`)
        "errors_last_segment": sum(int(e.get("segment") or 0) == segment and e.get("key") not in done for e in errors),
        "errors_retried": sum(int(e.get("segment") or 0) == segment and e.get("key") in done for e in errors),
        "by_harness": _groups(entries, "harness"),
        "by_task_kind": _groups([{**e, "task_kind": e.get("task_kind") or "swe"} for e in entries], "task_kind"),
        "by_repo": _groups(entries, "repo"),
        "by_status": dict(Counter(e["status"] for e in entries)),
        "by_node": dict(Counter(str(e["node_id"]) for e in entries if e.get("node_id"))),
        # errors a rerun in the same run finished, by the cause their reason names (node_lost, upstream_error, ...)
        "retried_by_cause": dict(
            Counter(_cause(e) for e in errors if int(e.get("segment") or 0) == segment and e.get("key") in done)
        ),
        "reject_reasons": dict(Counter((e.get("reason") or "").split(":")[0] for e in entries if not e["accepted"])),
        "tokens": {
            "prompt": sum(int(e.get("prompt_tokens") or 0) for e in entries),
            "completion": sum(int(e.get("completion_tokens") or 0) for e in entries),
            "trainable": sum(int(e.get("trainable_tokens") or 0) for e in entries),
        },
        "model_calls": sum(int(e.get("calls") or 0) for e in entries),
        "merge": _merge(entries),
        "lookups": _lookups(entries),
        "wall_seconds": round(wall, 1),
        "segments": len(list(segments(out))),
        "gpus": gpus,
        "gpu_hours": round(gpu_hours, 4),
        "accepted_per_gpu_hour": round(accepted / gpu_hours, 3) if gpu_hours > 0 else None,
        "wall_seconds_per_accepted": round(wall / accepted, 2) if accepted else None,
        "mean_stage_seconds": {k: round(v / attempts, 2) for k, v in sorted(stage_sums.items())} if attempts else {},
    }


def _cause(error_row: Mapping[str, Any]) -> str:
    """An error row's cause: ``run_error: node_lost: ...`` is node_lost, ``upstream_error: ...`` upstream_error."""
    parts = [p.strip() for p in str(error_row.get("reason") or "").split(":")]
    return parts[1] if len(parts) > 2 and parts[0] == "run_error" and parts[1] == "node_lost" else parts[0]


def write_summary(out: Path, summary: Mapping[str, Any]) -> Path:
    path = out / "summary.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    tmp.replace(path)
    return path


def _pct(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:.1%}"


def render_summary(summary: Mapping[str, Any]) -> Any:
    """A rich renderable of the summary."""
    from rich.console import Group
    from rich.table import Table

    head = Table(title=f"polar generate: {summary['run_dir']}", show_header=False)
    head.add_column("what")
    head.add_column("value", justify="right")
    tokens = summary["tokens"]
    merge = summary.get("merge") or {}
    per_hour = summary["accepted_per_gpu_hour"]
    lookups = summary.get("lookups") or {}
    for what, value in (
        ("engine / model", f"{summary['engine']} / {summary['model']}"),
        ("attempts (of planned)", f"{summary['attempts']} of {summary['planned']}"),
        ("accepted", f"{summary['accepted']} ({_pct(summary['acceptance_rate'])})"),
        ("errors, to retry", str(summary["errors_last_segment"])),
        ("errors an outage caused, run again", str(summary.get("errors_retried", 0))),
        ("outages (engine, Docker)", str(len(summary.get("outages") or []))),
        (
            "tokens prompt / completion / trainable",
            f"{tokens['prompt']} / {tokens['completion']} / {tokens['trainable']}",
        ),
        (
            "merge rate / drift tokens",
            f"{_pct(merge.get('merge_rate'))} / {merge.get('drift_tokens', 0)} "
            f"in {merge.get('turns_drifted', 0)} turns",
        ),
        ("compactions / sub-agents", f"{merge.get('compactions', 0)} / {merge.get('subagents', 0)}"),
        (
            "sessions with history / network lookups",
            f"{lookups.get('history', 0)} / {lookups.get('network', 0)} ({lookups.get('accepted', 0)} accepted)",
        ),
        ("wall time", f"{summary['wall_seconds']:.0f} s over {summary['segments']} segment(s)"),
        ("GPU-hours", f"{summary['gpu_hours']:.2f} ({summary['gpus']} GPUs)"),
        ("accepted per GPU-hour", "-" if per_hour is None else f"{per_hour:.2f}"),
    ):
        head.add_row(what, value)
    parts: list[Any] = [head]
    for title, key in (("per harness", "by_harness"), ("per repo", "by_repo")):
        table = Table(title=title)
        for column in (title.split()[-1], "attempts", "accepted", "rate"):
            table.add_column(column, justify="left" if column in ("harness", "repo") else "right")
        for name, g in summary[key].items():
            table.add_row(name, str(g["attempts"]), str(g["accepted"]), _pct(g["acceptance_rate"]))
        parts.append(table)
    for title, what, unit, counts in (
        ("chains split because", "kind", "splits", merge.get("splits")),
        ("rejected because", "reason", "sessions", summary["reject_reasons"]),
    ):
        if counts:
            table = Table(title=title)
            table.add_column(what)
            table.add_column(unit, justify="right")
            for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
                table.add_row(name, str(n))
            parts.append(table)
    return Group(*parts)
