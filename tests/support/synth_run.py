"""A run directory of made-up sessions, written by the real writer (`generate.state.RunState`), for the report's
tests and scripts/bench_report.py.

Sessions vary the way a batch run does: four harnesses, a dozen repositories, accepted (about half), rejected for
each common reason, machinery errors; one to three traces each (root, then a compaction or a sub-agent), drifted
turns, a cut parent, evaluation reports with FAIL_TO_PASS / PASS_TO_PASS rows and a test log on disk.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

from polar_cli.config import parse_recipe
from polar_cli.generate.state import RunState, Verdict
from polar_cli.generate.summary import summarize, write_summary

HARNESSES = ("pi", "opencode", "claude-code", "codex")
REASONS = ("unresolved: tests failed", "no_patch: no change", "timeout: 600 s", "tamper: tests/conftest.py",
           "harness_error: exit 1", "context_overflow: 32768")  # fmt: skip
EOT = 2


def recipe(tokenizer: str) -> Any:
    engine: dict[str, Any] = {"kind": "gold", "tokenizer": tokenizer}
    return parse_recipe({"name": "synth", "manifest": {"source": "m.jsonl"}, "harnesses": list(HARNESSES),
                         "engine": engine})  # fmt: skip


def _trace(rng: random.Random, index: int, calls: list[int], lineage: dict[str, Any], size: int) -> dict[str, Any]:
    prompt = [rng.randrange(100, 30_000) for _ in range(size)]
    response: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    turns = []
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the bug described in the issue.\n" + "details " * 40},
    ]
    for n, seq in enumerate(calls):
        if n:
            inter = [rng.randrange(100, 30_000) for _ in range(size // 8)]
            response += inter
            mask += [0] * len(inter)
            logprobs += [0.0] * len(inter)
            out = "\n".join(f"line {i}: output of the command" for i in range(rng.choice((3, 80))))
            messages.append({"role": "tool", "content": out, "tool_call_id": f"c{seq - 1}"})
        start = len(response)
        sampled = [rng.randrange(100, 30_000) for _ in range(size // 4)] + [EOT]
        response += sampled
        mask += [1] * len(sampled)
        logprobs += [-rng.random() * 2 for _ in sampled]
        turns.append([seq, start, len(response)])
        args = orjson.dumps({"command": f"grep -rn thing src/ # step {seq}"}).decode()
        call = {"id": f"c{seq}", "type": "function", "function": {"name": "bash", "arguments": args}}
        messages.append({"role": "assistant", "content": f"Step {seq}.", "tool_calls": [call]})
    drifted = [calls[-1]] if rng.random() < 0.2 else []
    return {
        "session_id": "",
        "seqs": calls,
        "messages": messages,
        "tools": orjson.dumps([{"type": "function", "function": {"name": "bash"}}]).decode(),
        "prompt_ids": prompt,
        "response_ids": response,
        "loss_mask": mask,
        "response_logprobs": logprobs,
        "finish_reason": "stop",
        "metadata": {"strategy": "prefix_merging", "turns": turns, "turns_drifted": drifted,
                     "drift_tokens": 3 * len(drifted), "start": "session_start" if index == 0 else "side_request",
                     "end": "full", "lineage": lineage},
    }  # fmt: skip


def session(rng: random.Random, i: int, out: Path, size: int) -> tuple[str, dict[str, Any]]:
    harness = HARNESSES[i % len(HARNESSES)]
    instance = f"org{i % 12}__repo{i % 12}-{1000 + i}"
    roll = rng.random()
    kind = "error" if i % 25 == 7 else "accepted" if roll < 0.55 else "rejected"
    reason = None if kind == "accepted" else "run_error: container died" if kind == "error" else rng.choice(REASONS)
    n_traces = rng.choice((1, 1, 2, 3))
    traces = [_trace(rng, 0, [0, 1, 2, 3][: rng.randint(2, 4)], {"kind": "root", "parent": None, "at_seq": None,
                                                                    "tool_call_id": None}, size)]  # fmt: skip
    for t in range(1, n_traces):
        kind_t = "compaction" if t == 1 else "subagent"
        lineage = {"kind": kind_t, "parent": 0, "at_seq": traces[0]["seqs"][-1], "tool_call_id": None}
        traces.append(_trace(rng, t, [10 * t, 10 * t + 1], lineage, size))
        if kind_t == "compaction":
            traces[0]["metadata"]["end"] = "truncated"
    key = f"{instance}::{harness}::1"
    sid = f"s{i:05d}"
    for t in traces:
        t["session_id"] = sid
    log_rel = f"logs/eval/{sid}.log"
    (out / log_rel).parent.mkdir(parents=True, exist_ok=True)
    (out / log_rel).write_text("".join(f"tests/test_x.py::test_{j} PASSED\n" for j in range(30)))
    resolved = kind == "accepted"
    tests = [{"test": "tests/test_x.py::test_bug", "group": "FAIL_TO_PASS", "status": "PASSED" if resolved else
              "FAILED", "ok": resolved}, {"test": "tests/test_x.py::test_old", "group": "PASS_TO_PASS",
              "status": "PASSED", "ok": True}]  # fmt: skip
    timing = {"init": rng.uniform(2, 40), "ready_wait": rng.uniform(0, 5), "run": rng.uniform(20, 900),
              "postrun": rng.uniform(1, 10), "eval": rng.uniform(5, 120)}  # fmt: skip
    timing = {k: round(v, 3) for k, v in timing.items()}
    timing["total"] = round(sum(timing.values()), 3)
    row = {
        "key": key,
        "session_id": sid,
        "instance_id": instance,
        "repo": f"org{i % 12}/repo{i % 12}",
        "harness": harness,
        "model": "synth-model",
        "attempt": 1,
        "status": "OK" if kind != "error" else "RUN_ERROR",
        "reward": 1.0 if resolved else 0.0,
        "accepted": resolved,
        "reason": reason,
        "patch": "diff --git a/x.py b/x.py\n+fixed\n",
        "eval": {
            "outcome": "resolved" if resolved else "unresolved",
            "resolved": resolved,
            "tests": tests,
            "log_path": log_rel,
            "log_excerpt": "tests/test_x.py::test_bug FAILED",
        },
        "exit_code": 0,
        "lookups": [{"kind": "history", "rule": "git-log", "command": "git log"}] if i % 17 == 0 else [],
        "timing": timing,
        "stats": {
            "model_calls": sum(len(t["seqs"]) for t in traces),
            "prompt_tokens": sum(len(t["prompt_ids"]) for t in traces),
            "completion_tokens": sum(len(t["response_ids"]) for t in traces),
            "trainable_tokens": sum(sum(t["loss_mask"]) for t in traces),
        },
        "traces": traces,
    }
    return kind, row


def write_run(out: Path, sessions: int, *, size: int = 64, seed: int = 0, finish: bool = True,
              tokenizer: str = "qwen3") -> Path:  # fmt: skip
    """``sessions`` sessions into ``out`` through `RunState`; ``finish`` writes summary.json as `polar generate` does.
    ``size``: prompt ids per trace (a sampled turn is a quarter of it). ``tokenizer``: the recipe's; the report
    decodes with it only where it is cached (``qwen3`` in $POLAR_CACHE_DIR)."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    state = RunState(out, recipe(tokenizer))
    for i in range(sessions):
        kind, row = session(rng, i, out, size)
        state.record(Verdict(kind, row))
    state.close()
    if finish:
        write_summary(out, summarize(out, gpus=1, planned=sessions, engine="gold", model="synth-model", segment=1))
    return out
