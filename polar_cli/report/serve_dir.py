"""A `polar serve` state directory read as a run: each SessionResult (results/<task>.jsonl) one session, its traces
turned into rows of the corpus row's shape, the figures counted from them.

A task's request (journal.jsonl) names its harness and instance; results whose task the journal does not (yet)
name are still shown. Pure reading, like `data`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from polar_cli.corpus.reading import read_rows
from polar_cli.report.session import Session

JOURNAL = "journal.jsonl"
RESULTS = "results"


def is_serve_dir(path: Path) -> bool:
    return (path / JOURNAL).exists()


def _requests(state_dir: Path) -> dict[str, dict[str, Any]]:
    return {
        str(line.get("task_id")): line.get("request") or {}
        for line in read_rows(state_dir / JOURNAL)
        if line.get("type") == "task"
    }


def _what_ran(request: dict[str, Any]) -> tuple[str, str, str]:
    """(harness, repo, instance) a task's request names, as far as it names them."""
    harness = request.get("harness")
    harness_name = harness.get("name") if isinstance(harness, dict) else harness
    prompt = request.get("prompt") or request
    instance = prompt.get("instance") if isinstance(prompt, dict) else None
    row = instance.get("row") if isinstance(instance, dict) else None
    source = row if isinstance(row, dict) else instance if isinstance(instance, dict) else {}
    inst = source.get("instance_id") or (instance.get("instance_id") if isinstance(instance, dict) else None)
    return str(harness_name or ""), str(source.get("repo") or ""), str(inst or "")


def _rows(result: dict[str, Any], request: dict[str, Any]) -> list[dict[str, Any]]:
    harness, repo, instance = _what_ran(request)
    key = f"{result.get('task_id')}/{result.get('index')}"
    status = str(result.get("status") or "")
    session = {
        "key": key,
        "session_id": result.get("session_id") or key,
        "instance_id": instance or key,
        "repo": repo,
        "harness": harness,
        "status": status,
        "reward": result.get("reward"),
        "accepted": status == "completed" and float(result.get("reward") or 0) > 0,
        "reason": result.get("reason"),
        "eval": result.get("evaluation"),
        "timing": result.get("timings") or {},
        "stats": result.get("stats") or {},
        "patch": result.get("patch"),
        "exit_code": result.get("exit_code"),
        "finished_at": result.get("finished_at"),
        "weight_versions": result.get("weight_versions"),
    }
    traces = result.get("traces") or []
    if not traces:
        return [{**session, "trace_index": 0, "trace_count": 0, "lineage": None, "messages": [], "trace": None}]
    rows = []
    for i, trace in enumerate(traces):
        meta = trace.get("metadata") or {}
        messages = trace.get("messages") or [*(trace.get("prompt_messages") or []), *(trace.get("response_messages")
                                                                                        or [])]  # fmt: skip
        rows.append(
            {
                **session,
                "trace_index": i,
                "trace_count": len(traces),
                "lineage": meta.get("lineage"),
                "messages": messages,
                "tools": trace.get("tools"),
                "trace": trace,
            }
        )
    return rows


def _results(state_dir: Path) -> Iterator[dict[str, Any]]:
    folder = state_dir / RESULTS
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.jsonl")):
        yield from read_rows(path)


def serve_sessions(state_dir: Path) -> Iterator[Session]:
    requests = _requests(state_dir)
    for result in _results(state_dir):
        rows = _rows(result, requests.get(str(result.get("task_id")), {}))
        status = rows[0]["status"]
        yield Session("accepted" if rows[0]["accepted"] else "error" if status == "error" else "rejected", rows)


def serve_figures(state_dir: Path) -> dict[str, Any]:
    """The service's numbers, counted from its results (a service has no summary.json)."""
    requests = _requests(state_dir)
    attempts = accepted = 0
    by_status: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    tokens: Counter[str] = Counter()
    for result in _results(state_dir):
        attempts += 1
        status = str(result.get("status") or "")
        by_status[status] += 1
        ok = status == "completed" and float(result.get("reward") or 0) > 0
        accepted += ok
        if not ok:
            reasons[str(result.get("reason") or status).split(":")[0]] += 1
        for trace in result.get("traces") or ():
            tokens["prompt"] += len(trace.get("prompt_ids") or ())
            tokens["completion"] += len(trace.get("response_ids") or ())
            tokens["trainable"] += sum(trace.get("loss_mask") or ())
    return {
        "kind": "serve",
        "name": state_dir.name,
        "run_dir": str(state_dir),
        "tasks": len(requests),
        "attempts": attempts,
        "accepted": accepted,
        "rejected": attempts - accepted - by_status.get("error", 0),
        "acceptance_rate": round(accepted / attempts, 4) if attempts else None,
        "errors_last_segment": by_status.get("error", 0),
        "errors_retried": 0,
        "by_status": dict(by_status),
        "reject_reasons": dict(reasons),
        "tokens": {k: tokens[k] for k in ("prompt", "completion", "trainable")},
        "lookups": {"sessions": 0},
        "wall_seconds": None,
        "live": True,
        "read_at": time.time(),
    }
