"""A finished session as one corpus row (docs/design.md "Corpus row"), and the verdict that decides where it goes.

Accepted iff the harness ended normally, the instance is resolved (SWE-bench grading) and at least one model call is
trainable. Everything else that ran is a reject, and everything the machinery failed at is an error: the session is not
finished and the next run retries it. Every row that is not accepted has a ``reason`` of the form ``code: detail``,
the code from `REASONS` (the summary counts them by code).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from polar_cli.capture import CaptureRecord
from polar_cli.generate.lookups import find_lookups
from polar_cli.generate.session_logs import log_excerpt
from polar_cli.harness.history import Stripped
from polar_cli.harness.session import Collected, HarnessRun
from polar_cli.node.pools import RunEnd
from polar_cli.swe.evaluate import Evaluation
from polar_cli.swe.manifest import Instance
from polar_cli.trajectory import Build, Trace
from polar_cli.trajectory.stats import COUNTS

Status = Literal[
    "OK",
    "TIMEOUT",
    "OUTPUT_LIMIT",
    "OOM",
    "HARNESS_ERROR",
    "CONTEXT_OVERFLOW",
    "INIT_ERROR",
    "INIT_TIMEOUT",
    "RUN_ERROR",
    "POSTRUN_ERROR",
    "EVAL_ERROR",
    "UPSTREAM_ERROR",
    "GATEWAY_ERROR",
]
# the machinery failed: not the agent's doing, so not a verdict on the session
INFRA: frozenset[str] = frozenset(
    {"INIT_ERROR", "INIT_TIMEOUT", "RUN_ERROR", "POSTRUN_ERROR", "EVAL_ERROR", "UPSTREAM_ERROR", "GATEWAY_ERROR"}
)
# every reason code a row can carry, and what it means (rejects first, then errors, which the next run retries)
REASONS: dict[str, str] = {
    "context_overflow": "the main conversation's last model call was refused: its prompt did not fit the context",
    "timeout": "the harness ran past its timeout (or the pool's backstop cut its run)",
    "output_limit": "the harness wrote more output than the session allows (1 GiB) and was killed there",
    "oom": "the harness exited non-zero after the kernel killed a process of it at the container's memory limit",
    "harness_error": "the harness exited non-zero",
    "tamper": "the patch changed test infrastructure (eval.tamper: reject)",
    "no_patch": "the harness ended normally without changing the repository",
    "unresolved": "the patch was graded and the instance is not resolved",
    "no_trainable_call": "resolved, but no model call has token ids to train on",
    "init_error": "error: the container or the session could not be prepared",
    "init_timeout": "error: the session timed out before its harness ever ran",
    "run_error": "error: running the harness failed in the runtime (Docker)",
    "postrun_error": "error: the patch or the harness's logs could not be read",
    "eval_error": "error: the evaluation could not run",
    "upstream_error": "error: the inference server failed a model call (down, timed out, overloaded, bad answer)",
    "gateway_error": "error: the gateway refused a call of the harness (a request it cannot translate)",
}
# capture error kinds of a refused harness request that are the harness hanging up, not the gateway's refusal
_NOT_REFUSALS = frozenset({None, "authentication"})


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """Everything POSTRUN learned about one session."""

    key: str
    session_id: str
    instance: Instance
    harness: str
    attempt: int
    model: str
    end: RunEnd
    harness_run: HarnessRun | None
    collected: Collected | None
    records: Sequence[CaptureRecord]
    build: Build
    evaluation: Evaluation | None
    eval_seconds: float = 0.0
    # the evaluation's test_output.txt, relative to the run directory (`session_logs`); None when none was written
    eval_log_path: str | None = None
    # what INIT stripped from the repository's history; None when it was kept (or INIT never got there)
    stripped: Stripped | None = None


def machinery_fault(records: Sequence[CaptureRecord]) -> tuple[Status, str] | None:
    """A model call the machinery failed: the inference server's failure, or the gateway refusing the harness's
    request. A context overflow is neither (the model's context is what it is)."""
    for r in records:
        if r.status == "upstream_error" and r.error_kind != "context_length":
            return "UPSTREAM_ERROR", f"call {r.seq}: {r.error}"
        if r.status == "client_error" and r.error_kind not in _NOT_REFUSALS:
            return "GATEWAY_ERROR", f"call {r.seq}: {r.error}"
    return None


def context_overflow(records: Sequence[CaptureRecord]) -> str | None:
    """What the server said when the main conversation's last model call did not fit the context; None otherwise.

    The main conversation is the calls that offer tools (a harness's side calls, such as titles and the summary
    call of a compaction, offer none): opencode, refused, compacts with a summary call that fits and is then refused
    again, until its timeout."""
    main = [r for r in records if (r.normalized or {}).get("tools")] or list(records)
    if main and main[-1].error_kind == "context_length":
        return f"call {main[-1].seq}: {main[-1].error}"
    return None


def status_of(facts: SessionFacts) -> tuple[Status, str | None]:
    """The session's status and, when it is not OK, what happened."""
    end, run = facts.end, facts.harness_run
    if end.reason == "init_error":
        return "INIT_ERROR", end.error
    if end.reason == "run_error":
        return "RUN_ERROR", end.error
    if (fault := machinery_fault(facts.records)) is not None and not _accepted(facts):
        return fault
    if (overflow := context_overflow(facts.records)) is not None:
        return "CONTEXT_OVERFLOW", overflow
    if end.reason == "timeout" and run is None:
        # it never ran, or was cut off by the pool's backstop: nothing the agent did is known
        return ("INIT_TIMEOUT" if not facts.records else "TIMEOUT"), end.error
    if facts.collected is not None and facts.collected.error:
        return "POSTRUN_ERROR", facts.collected.error
    if facts.evaluation is not None and facts.evaluation.outcome == "error":
        return "EVAL_ERROR", facts.evaluation.reason
    if run is None:
        return "RUN_ERROR", end.error or "the harness did not run"
    if run.status == "timeout":
        return "TIMEOUT", "the harness ran past its timeout"
    if run.status == "output_limit":
        return "OUTPUT_LIMIT", run.error or "the harness wrote more output than the session allows"
    if run.status == "oom":
        return "OOM", run.error or f"the harness ran out of memory and exited with {run.exit_code}"
    if run.status == "harness_error":
        return "HARNESS_ERROR", f"the harness exited with {run.exit_code}"
    return "OK", None


def _accepted(facts: SessionFacts) -> bool:
    """Resolved with a trainable call: a session whose harness got past a failed call and still made it."""
    ok = facts.harness_run is not None and facts.harness_run.status == "ok"
    return ok and facts.evaluation is not None and facts.evaluation.resolved and bool(facts.build.traces)


def verdict(facts: SessionFacts) -> tuple[Literal["accepted", "rejected", "error"], Status, str | None]:
    """(where the row goes, status, reason it was not accepted)."""
    status, detail = status_of(facts)
    if status in INFRA:
        return "error", status, f"{status.lower()}: {detail}"
    if status != "OK":
        return "rejected", status, f"{status.lower()}: {detail}"
    evaluation = facts.evaluation
    if evaluation is not None and evaluation.tamper is not None and evaluation.tamper.rejected:
        # "tamper: <paths>", its own reject kind (the summary counts reasons by what precedes the first colon)
        return "rejected", status, evaluation.tamper.reason()
    if facts.collected is not None and not facts.collected.patch.strip():
        return "rejected", status, "no_patch: the harness ended normally without changing the repository"
    if evaluation is None or not evaluation.resolved:
        why = (evaluation.reason or evaluation.grade.reason) if evaluation is not None else "not evaluated"
        return "rejected", status, f"unresolved: {why or 'tests failed'}"
    if not facts.build.traces:
        return "rejected", status, "no_trainable_call: no model call has token ids"
    return "accepted", status, None


def main_trace(traces: Sequence[Trace]) -> Trace | None:
    """The conversation the row's ``messages`` show: the trace holding the session's last trainable call."""
    return max(traces, key=lambda t: max(t.seqs), default=None)


def _eval_report(evaluation: Evaluation | None, log_path: str | None) -> dict[str, Any] | None:
    if evaluation is None:
        return None
    report = evaluation.to_dict()
    report.pop("log_tail", None)  # the whole log is at log_path; the row keeps a bounded excerpt
    report["log_path"] = log_path
    report["log_excerpt"] = log_excerpt(evaluation)
    return report


def _stats(facts: SessionFacts) -> dict[str, Any]:
    """Calls, tokens and the build's merge stats (`trajectory.stats.MergeStats.counts`)."""
    ok = [r for r in facts.records if r.status == "ok"]
    merge = facts.build.stats.counts()
    return {
        "model_calls": len(facts.records),
        "model_calls_ok": len(ok),
        "prompt_tokens": sum(len(r.prompt_ids) for r in ok),
        "completion_tokens": sum(len(r.response_ids) for r in ok),
        "trainable_tokens": sum(sum(t.loss_mask) for t in facts.build.traces),
        "traces": len(facts.build.traces),
        # token-in mode: the calls sent as exact ids (the others the server rendered; their records say why)
        "token_in_calls": sum(r.prompt_mode == "token_in" for r in ok),
        **{k: merge[k] for k in MERGE_STATS},
        "split_counts": merge["split_counts"],
        "splits": [s.reason for s in facts.build.stats.splits],
    }


# the merge counts a row's stats carry (and its state line, for the run's summary): a session's, and its rate
MERGE_STATS = (*(k for k in COUNTS if k != "sessions"), "merge_rate")


def build_row(
    facts: SessionFacts, timing: Mapping[str, float]
) -> tuple[Literal["accepted", "rejected", "error"], dict[str, Any]]:
    """The corpus (or rejects, or errors) row of a session, and which file it belongs in."""
    kind, status, reason = verdict(facts)
    trace = main_trace(facts.build.traces)
    evaluation = facts.evaluation
    resolved = bool(evaluation is not None and evaluation.resolved)
    run = facts.harness_run
    row: dict[str, Any] = {
        "key": facts.key,
        "session_id": facts.session_id,
        "instance_id": facts.instance.instance_id,
        "repo": facts.instance.repo,
        "harness": facts.harness,
        "model": facts.model,
        "attempt": facts.attempt,
        "status": status,
        "reward": 1.0 if resolved else 0.0,
        "accepted": kind == "accepted",
        "reason": reason,
        "messages": trace.messages if trace is not None else [],
        "tools": orjson.dumps(trace.tools if trace is not None else []).decode(),
        "traces": [t.to_row() for t in facts.build.traces],
        "patch": facts.collected.patch if facts.collected is not None else "",
        "eval": _eval_report(evaluation, facts.eval_log_path),
        "lookups": find_lookups(facts.records, facts.instance.base_commit),
        "stripped": facts.stripped.to_dict() if facts.stripped is not None else None,
        "exit_code": run.exit_code if run is not None else None,
        "timing": {**timing, "eval": round(facts.eval_seconds, 3)},
        "stats": _stats(facts),
    }
    return kind, row
