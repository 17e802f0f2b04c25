"""Session and task results, and the training-safety rules that decide what a trainer may learn from.

A session ends in one of four statuses:

    completed   the harness ran to its end and the evaluator graded it: reward = the evaluator's reward
    timeout     the agent ran out of its budget (session or agent timeout): trainable, reward 0.0
    error       the machinery failed (container, engine, grader), after the service's retries: no verdict on the model
    cancelled   the task was cancelled (DELETE), or the session was cut by ``early_stop_min_usable_sessions``

The rules (each result says which applied):

- Rule 1: an ``error`` session is fully masked: every ``loss_mask`` entry 0, ``masked: true``, reward ``None`` ("no
  reward"; `shaping` writes 0.0 where the trainer asked for it). A fault of the machinery is never a zero reward to
  learn from.
- Rule 2: a ``timeout`` stays trainable with reward 0.0: running out of budget is the policy's doing.
- Rule 3: a session cut by early stop becomes a fully masked placeholder (``placeholder: true``, no traces): the
  group keeps its size. A cancelled session is masked the same way.
- Rule 4: ``reported_reward`` is what the evaluator said (None when it never ran); ``reward`` is the effective one the
  rules above give. They differ for a timed-out session whose partial patch happened to pass.

`SessionOutput` is what the node's stages produce (`serve.stages`, or a simulation); the functions here are pure.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from polar_cli.serve.shaping import ordered_versions

SessionStatus = Literal["completed", "timeout", "error", "cancelled"]
SESSION_STATUSES: tuple[SessionStatus, ...] = ("completed", "timeout", "error", "cancelled")


@dataclass(frozen=True, slots=True)
class SessionOutput:
    """What one session produced, before the training-safety rules."""

    session_id: str
    status: SessionStatus
    reason: str | None = None
    # the evaluator's reward and report (None: it did not run)
    reported_reward: float | None = None
    report: Mapping[str, Any] | None = None
    # `Trace.to_row()` dicts, each with its ``weight_versions``
    traces: Sequence[Mapping[str, Any]] = ()
    patch: str = ""
    exit_code: int | None = None
    timings: Mapping[str, float] = field(default_factory=dict)
    weight_versions: Sequence[str] = ()
    stats: Mapping[str, Any] = field(default_factory=dict)
    # the session's egress proxy log (`egress.EgressLog.to_rows`); None: the service allows no host
    egress: Sequence[Mapping[str, Any]] | None = None


def _masked(trace: Mapping[str, Any]) -> dict[str, Any]:
    return {**trace, "loss_mask": [0] * len(trace.get("response_ids") or ())}


def session_result(
    task_id: str,
    index: int,
    output: SessionOutput,
    *,
    attempts: int,
    node_id: str,
    seed: int | None,
    metadata: Mapping[str, Any],
) -> dict[str, Any]:
    """The SessionResult of sample ``index`` (Rules 1, 2 and 4)."""
    masked = output.status in ("error", "cancelled")
    reward: float | None
    if masked:
        reward = None
    elif output.status == "completed":
        reward = float(output.reported_reward or 0.0)
    else:
        reward = 0.0
    traces = [_masked(t) if masked else dict(t) for t in output.traces]
    return {
        "task_id": task_id,
        "index": index,
        "session_id": output.session_id,
        "status": output.status,
        "reason": output.reason,
        "reward": reward,
        "reported_reward": output.reported_reward,
        "masked": masked,
        "placeholder": False,
        "evaluation": dict(output.report) if output.report is not None else None,
        "traces": traces,
        "patch": output.patch,
        "exit_code": output.exit_code,
        "timings": dict(output.timings),
        "weight_versions": ordered_versions(output.weight_versions),
        "node_id": node_id,
        "attempts": attempts,
        "seed": seed,
        "stats": dict(output.stats),
        "egress": [dict(e) for e in output.egress] if output.egress is not None else None,
        "metadata": dict(metadata),
        "finished_at": time.time(),
    }


def placeholder_result(
    task_id: str, index: int, reason: str, *, node_id: str, seed: int | None, metadata: Mapping[str, Any]
) -> dict[str, Any]:
    """A fully masked stand-in for a session that was cut or cancelled before it produced anything (Rule 3)."""
    output = SessionOutput(session_id="", status="cancelled", reason=reason)
    result = session_result(task_id, index, output, attempts=0, node_id=node_id, seed=seed, metadata=metadata)
    result["placeholder"] = True
    return result


def usable(result: Mapping[str, Any]) -> bool:
    """A session a trainer can learn from: completed or timed out (not an error, not cancelled), and not masked."""
    return result["status"] in ("completed", "timeout") and not result.get("masked")


def task_result(
    task_id: str,
    state: str,
    num_samples: int,
    results: Mapping[int, Mapping[str, Any]],
    *,
    metadata: Mapping[str, Any],
    submitted_at: float,
    finished_at: float | None,
    include_sessions: bool = True,
) -> dict[str, Any]:
    """The TaskResult: the group so far (sessions by index), counts per status, and the mean effective reward over
    the usable sessions (None while none is)."""
    ordered = [results[i] for i in sorted(results)]
    counts = {s: 0 for s in SESSION_STATUSES}
    for r in ordered:
        counts[r["status"]] += 1
    rewards = [float(r["reward"]) for r in ordered if usable(r)]
    payload: dict[str, Any] = {
        "task_id": task_id,
        "state": state,
        "done": state in ("completed", "cancelled"),
        "num_samples": num_samples,
        "finished_sessions": len(ordered),
        "counts": counts,
        "usable": len(rewards),
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "metadata": dict(metadata),
        "submitted_at": submitted_at,
        "finished_at": finished_at,
    }
    if include_sessions:
        payload["sessions"] = ordered
    return payload
