"""A finished session as one corpus row (docs/design.md "Corpus row"), and the verdict that decides where it goes.

Accepted iff the harness ended normally, the instance is resolved (SWE-bench grading) and at least one model call is
trainable. Everything else that ran is a reject, and everything the machinery failed at is an error: the session is not
finished and the next run retries it. Every row that is not accepted has a ``reason`` of the form ``code: detail``,
the code from `REASONS` (the summary counts them by code).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from polar_cli.capture import CaptureRecord
from polar_cli.generate.lookups import find_lookups
from polar_cli.generate.session_logs import log_excerpt
from polar_cli.harness import ADAPTERS
from polar_cli.harness.history import Stripped
from polar_cli.harness.recovery import recovered
from polar_cli.harness.session import Collected, HarnessRun
from polar_cli.judge.client import JudgeResult
from polar_cli.node.pools import RunEnd
from polar_cli.swe.evaluate import Evaluation
from polar_cli.swe.manifest import Instance
from polar_cli.trajectory import Build, per_request
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
    "JUDGE_ERROR",
]
# the machinery failed: not the agent's doing, so not a verdict on the session
INFRA: frozenset[str] = frozenset(
    {"INIT_ERROR", "INIT_TIMEOUT", "RUN_ERROR", "POSTRUN_ERROR", "EVAL_ERROR", "UPSTREAM_ERROR", "GATEWAY_ERROR"}
    | {"JUDGE_ERROR"}
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
    "judge": "the judge's score (judge.mode gate) or the combined reward (weighted) is below judge.threshold",
    "init_error": "error: the container or the session could not be prepared",
    "init_timeout": "error: the session timed out before its harness ever ran",
    "run_error": "error: running the harness failed in the runtime (Docker)",
    "postrun_error": "error: the patch or the harness's logs could not be read",
    "eval_error": "error: the evaluation could not run",
    "upstream_error": "error: the inference server failed a model call (down, timed out, overloaded, bad answer)",
    "gateway_error": "error: the gateway refused a call of the harness (a request it cannot translate)",
    "judge_error": "error: the judge model could not score the session (unreachable, no parsable answer after retries)",
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
    # what the session got to: none of it for a session that never ran (a node lost, a POSTRUN that raised)
    harness_run: HarnessRun | None = None
    collected: Collected | None = None
    records: Sequence[CaptureRecord] = ()
    build: Build = field(default_factory=lambda: per_request([]))
    evaluation: Evaluation | None = None
    eval_seconds: float = 0.0
    # the evaluation's test_output.txt, relative to the run directory (`session_logs`); None when none was written
    eval_log_path: str | None = None
    # what INIT stripped from the repository's history; None when it was kept (or INIT never got there)
    stripped: Stripped | None = None
    # every connection the session's egress proxy saw (`egress.EgressLog.to_rows`); None: no allowlist, no proxy
    egress: list[dict[str, Any]] | None = None
    # the judge's scores (docs/judge.md); None when no judge is configured or the session was not worth judging
    judge: JudgeResult | None = None
    # why the judge could not score it: a machinery error, the key runs again
    judge_error: str | None = None
    # "swe" (graded by FAIL_TO_PASS / PASS_TO_PASS) or "harbor" (graded by its verifier's reward, `polar_cli.harbor`)
    task_kind: str = "swe"
    # a Harbor verifier's named rewards and the one compared with the threshold (None: SWE grading, or not verified)
    rewards: Mapping[str, float] | None = None
    reward: float | None = None


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
    if run.status == "harness_error" and recovered_from(facts) is None:
        return "HARNESS_ERROR", f"the harness exited with {run.exit_code}"
    if facts.judge_error is not None:
        return "JUDGE_ERROR", facts.judge_error
    return "OK", None


def recovered_from(facts: SessionFacts) -> str | None:
    """What a harness that exited non-zero recovered from (`harness.recovery`); None when its exit stands."""
    run = facts.harness_run
    if run is None or run.status != "harness_error":
        return None
    adapter = ADAPTERS.get(facts.harness)
    return recovered(adapter.recovery if adapter else None, run.exit_code, run.output or b"", facts.records)


def _accepted(facts: SessionFacts) -> bool:
    """Resolved with a trainable call: a session whose harness got past a failed call and still made it."""
    ok = facts.harness_run is not None and facts.harness_run.status == "ok"
    return ok and facts.evaluation is not None and facts.evaluation.resolved and bool(facts.build.traces)


def verdict(facts: SessionFacts) -> tuple[Literal["accepted", "rejected", "error"], Status, str | None]:
    """(where the row goes, status, reason it was not accepted): the tests' verdict, then the judge's."""
    kind, status, reason = tests_verdict(facts)
    if facts.judge is None or kind == "error":
        return kind, status, reason
    tests = tests_reward(facts)
    kind, reason = facts.judge.policy.verdict(kind, reason, tests, facts.judge.score, bool(facts.build.traces))
    return kind, status, reason


def tests_reward(facts: SessionFacts) -> float:
    """The reward before the judge: a Harbor verifier's, else 1.0 when the instance is resolved."""
    if facts.reward is not None:
        return facts.reward
    return 1.0 if facts.evaluation is not None and facts.evaluation.resolved else 0.0


def tests_verdict(facts: SessionFacts) -> tuple[Literal["accepted", "rejected", "error"], Status, str | None]:
    """The verdict without the judge."""
    status, detail = status_of(facts)
    if status in INFRA:
        return "error", status, f"{status.lower()}: {detail}"
    if status != "OK":
        return "rejected", status, f"{status.lower()}: {detail}"
    evaluation = facts.evaluation
    if evaluation is not None and evaluation.tamper is not None and evaluation.tamper.rejected:
        # "tamper: <paths>", its own reject kind (the summary counts reasons by what precedes the first colon)
        return "rejected", status, evaluation.tamper.reason()
    # a Harbor task's work may lie outside its workdir (a service, a file elsewhere): its verifier alone decides
    if facts.task_kind == "swe" and facts.collected is not None and not facts.collected.patch.strip():
        return "rejected", status, "no_patch: the harness ended normally without changing the repository"
    if evaluation is None or not evaluation.resolved:
        why = (evaluation.reason or evaluation.grade.reason) if evaluation is not None else "not evaluated"
        return "rejected", status, f"unresolved: {why or 'tests failed'}"
    if not facts.build.traces:
        return "rejected", status, "no_trainable_call: no model call has token ids"
    return "accepted", status, None


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
        "task_kind": facts.task_kind,
        "reward": facts.reward if facts.reward is not None else (1.0 if resolved else 0.0),
        "rewards": dict(facts.rewards) if facts.rewards is not None else {"resolved": 1.0 if resolved else 0.0},
        "accepted": kind == "accepted",
        "reason": reason,
        "traces": [t.to_row() for t in facts.build.traces],
        "patch": facts.collected.patch if facts.collected is not None else "",
        "eval": _eval_report(evaluation, facts.eval_log_path),
        "lookups": find_lookups(facts.records, facts.instance.base_commit),
        "stripped": facts.stripped.to_dict() if facts.stripped is not None else None,
        "egress": facts.egress,
        "exit_code": run.exit_code if run is not None else None,
        # a non-zero exit that reported only an error the harness recovered from (a compaction): why it is no error
        "recovered": recovered_from(facts) if status == "OK" else None,
        "timing": {**timing, "eval": round(facts.eval_seconds, 3)},
        "stats": _stats(facts),
        "judge": None,
    }
    if facts.judge is not None:
        row["judge"] = facts.judge.to_row(row["reward"])
        row["reward"] = row["judge"]["reward"]
    return kind, row


# the fields of a trace row that a segment row carries at its top level (the rest go under ``trace``)
_SEGMENT_TOP = ("messages", "tools")


def segment_rows(row: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A session row as the rows of its file: one per trace (segment), written together (docs/design.md "Corpus
    row").

    Each carries the session's fields, ``trace_index`` / ``trace_count``, the trace's ``lineage``, its ``messages``
    (the context each answer was sampled in; re-sent answers ``"weight": 0``) and ``tools`` for SFT, and its token
    fields under ``trace``. So every sampled answer is trained in exactly one row, the root segment's row holds the
    task as the harness sent it, and a session with no trace still has one row (``trace_count`` 0)."""
    session = {k: v for k, v in row.items() if k != "traces"}
    traces = row.get("traces") or []
    if not traces:
        return [
            {**session, "trace_index": 0, "trace_count": 0, "lineage": None, "messages": [], "tools": "[]"}
            | {"trace": None}
        ]
    out = []
    for i, t in enumerate(traces):
        segment = {"trace_index": i, "trace_count": len(traces), "lineage": (t.get("metadata") or {}).get("lineage")}
        segment |= {"messages": t.get("messages") or [], "tools": t.get("tools") or "[]"}
        segment["trace"] = {k: v for k, v in t.items() if k not in _SEGMENT_TOP and k != "session_id"}
        out.append({**session, **segment})
    return out
