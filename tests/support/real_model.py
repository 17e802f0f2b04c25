"""`polar generate` with ``engine.kind=vllm`` against the REAL vLLM CPU server and small real models: the recipe, the
run, and the checks (every key one row, every reason code documented, no session past its timeout, captured prompt
ids equal to the server's own ``/tokenize``). Shared by tests/integration/generate/test_generate_real_model.py and
scripts/bench_real_model.py (every harness).

The models (tests/support/models.py): SmolLM2-135M-Instruct, 8K context (``max_position_embeddings`` 8192, so
vLLM's default ``--max-model-len``), served with the hermes tool parser (see SMOLLM2_ARGS); and the tiny
random-weight Qwen3 with the real Qwen3 tokenizer and template, with vLLM's hermes tool parser and qwen3 reasoning
parser: at its own 4,096 tokens (the shared ``qwen3_tiny`` fixture; most harnesses' first prompt overflows it) or
with a 40,960-token context (Qwen3's own). Its KV cache is 512 bytes a token, so the long context fits the 1 GiB
``VLLM_CPU_KVCACHE_SPACE`` many times over.

SmolLM2's template renders no tools: its prompts are the harness's system prompt and messages only (Claude Code's
first is ~4.6K tokens there, ~12K with Qwen3's template, which renders its 12 tool schemas).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from polar_cli.capture import CaptureRecord, read_capture_dir
from polar_cli.generate.rows import REASONS
from polar_cli.swe.manifest import load_manifest
from tests.support.models import QWEN3_TINY_DIR, SMOLLM2_DIR
from tests.support.vllm_server import DEFAULT_ARGS, VLLMServer

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "recipes" / "demo" / "instances.jsonl"
INSTRUCTION = "The repository {repo} is checked out in {workdir}. Fix the following issue there.\n\n{problem_statement}"
QWEN3_LONG_CONTEXT = 40960
QWEN3_ARGS = (*DEFAULT_ARGS, "--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "qwen3")


def qwen3_args(context: int | None) -> tuple[str, ...]:
    """The shared fixture's arguments; with `context`, that ``--max-model-len``. The tiny config says 4096 and vLLM
    refuses a longer context unless the config allows it: random weights have nothing to extrapolate, the rotary
    embedding is computed for any position."""
    if context is None:
        return QWEN3_ARGS
    override = json.dumps({"max_position_embeddings": max(context, 4096)})
    return (*QWEN3_ARGS, "--max-model-len", str(context), "--hf-overrides", override)


# SmolLM2's template renders no tools, but every harness sends some with tool_choice "auto", which vLLM refuses
# without a tool parser (a 400 before any token: each session would be an upstream_error). hermes parses the
# <tool_call> blocks the model will hardly ever write.
SMOLLM2_ARGS = (*DEFAULT_ARGS, "--enable-auto-tool-choice", "--tool-call-parser", "hermes")
SESSION_MARGIN_S = 60.0
ROW_FILES = ("corpus", "rejects", "errors")


def qwen3_server(context: int | None = QWEN3_LONG_CONTEXT, log_path: Path | None = None) -> VLLMServer:
    return VLLMServer(QWEN3_TINY_DIR, "qwen3-tiny", extra_args=qwen3_args(context), log_path=log_path)


def smollm2_server(log_path: Path | None = None) -> VLLMServer:
    return VLLMServer(SMOLLM2_DIR, "smollm2", extra_args=SMOLLM2_ARGS, log_path=log_path)


def write_recipe(
    path: Path,
    server: VLLMServer,
    harnesses: list[str],
    *,
    limit: int,
    session_s: float = 180.0,
    max_tokens_cap: int = 96,
    token_in: bool = False,
    run: int = 2,
    engine: dict[str, Any] | None = None,
) -> dict[str, Any]:
    recipe: dict[str, Any] = {
        "name": f"real-{server.served_model_name}",
        "manifest": {"source": str(MANIFEST), "limit": limit},
        "harnesses": harnesses,
        "instruction": INSTRUCTION,
        "engine": {
            "kind": "vllm",
            "url": server.url,
            "tokenizer": str(server.model_dir),
            "token_in": token_in,
            "max_tokens_cap": max_tokens_cap,
            # a prefill of a 30K-token prompt on two shared cores is tens of seconds; never the session's whole budget
            "upstream_timeout": session_s,
            **(engine or {}),
        },
        "runtime": {"network": "host", "min_free_gb": 0},
        # no READY buffer: a session's clock starts at INIT, so one waiting for a RUN slot behind slow sessions on two
        # cores would spend its timeout waiting
        "concurrency": {"init": 2, "run": run, "postrun": 2, "ready": 0},
        "timeouts": {"session": session_s, "eval": 300},
        "output": {"formats": ["jsonl"]},
    }
    path.write_text(json.dumps(recipe))  # JSON is YAML
    return recipe


# Random weights call a tool only when made to: a structured-output regex (as a deployment could add to every call)
# makes each Qwen3 answer a well-formed hermes call of a `bash` tool with a `command` (Pi's and mini-swe-agent's),
# ended by <|im_end|> (<|endoftext|> banned), thinking off so the regex applies from the first sampled token. The
# answers then end their turn, the harness runs the command and calls again: the continuations token-in can send.
# mini-swe-agent ends when the command is its submit line.
FORCE_BASH = {
    "extra_body": {
        "structured_outputs": {
            "regex": r'<tool_call>\n\{"name": "bash", "arguments": \{"command": '
            r'"(ls|git status|echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT)"\}\}\n</tool_call>'
        },
        "logit_bias": {"151643": -100},
    },
    "chat_template_kwargs": {"enable_thinking": False},
}


@dataclass
class Generated:
    code: int
    summary: dict[str, Any]
    stderr: str
    wall_s: float


def run_generate(recipe: Path, out: Path, timeout_s: float) -> Generated:
    argv = [sys.executable, "-m", "polar_cli", "generate", str(recipe), "--out", str(out), "--no-progress", "--json"]
    started = time.monotonic()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    try:
        summary = json.loads(done.stdout) if done.stdout.strip() else {}
    except ValueError:
        summary = {}
    return Generated(done.returncode, summary, done.stderr, time.monotonic() - started)


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    data = path.read_bytes()
    return [json.loads(line) for line in data[: data.rfind(b"\n") + 1].splitlines()]


def rows(out: Path) -> dict[str, list[dict[str, Any]]]:
    """Each row file's sessions: corpus and rejects hold one row per trace (a session's rows together, each with the
    session's fields), so a session is its first row, once its group is whole."""
    return {name: sessions_of(lines(out / f"{name}.jsonl")) for name in ROW_FILES}


def sessions_of(segment_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for row in segment_rows:
        index, count = row.get("trace_index", 0), row.get("trace_count", 0)
        if index == 0:
            out.append(row)
        else:
            assert out and out[-1]["key"] == row["key"], f"{row['key']}: trace {index} apart from its session"
        assert index < max(count, 1), f"{row['key']}: trace {index} of {count}"
    return out


def planned_keys(harnesses: list[str], limit: int) -> set[str]:
    instances = load_manifest(MANIFEST)[:limit]
    return {f"{i.instance_id}::{h}::1" for i in instances for h in harnesses}  # attempts count from 1


def reason_code(row: dict[str, Any]) -> str:
    return str(row["reason"]).split(":", 1)[0]


def session_seconds(row: dict[str, Any]) -> float:
    """What the session timeout covers: INIT, the wait for a RUN slot, RUN."""
    timing = row.get("timing") or {}
    return float(sum(timing.get(stage) or 0.0 for stage in ("init", "ready_wait", "run")))


def tokenize_body(model: str, normalized: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": normalized["messages"], "add_generation_prompt": True}
    if normalized.get("tools"):
        body["tools"] = normalized["tools"]
    if normalized.get("chat_template_kwargs"):
        body["chat_template_kwargs"] = normalized["chat_template_kwargs"]
    return body


def server_tokenize(server: VLLMServer, normalized: Any) -> list[int]:
    resp = httpx.post(server.url + "/tokenize", json=tokenize_body(server.served_model_name, normalized), timeout=120)
    resp.raise_for_status()
    tokens: list[int] = resp.json()["tokens"]
    return tokens


@dataclass
class IdCheck:
    """Captured prompt ids against the server's /tokenize of the same normalized request."""

    rendered: int = 0  # ok calls the server rendered itself: compared with /tokenize
    equal: int = 0
    mismatches: list[str] = field(default_factory=list)
    # token-in calls: the ids were sent, not rendered; checked against the server's usage.prompt_tokens instead
    token_in: int = 0
    token_in_counted: int = 0
    # ...and whose ids start with an earlier call's prompt + sampled ids, exactly (the continuation they claim to be)
    token_in_extends: int = 0
    # informational: the sent ids are also what /tokenize renders (Qwen3's template renders a past assistant turn
    # without its empty think block, and its tool-call JSON with other spacing than the model sampled: rarely)
    token_in_retokenize_equal: int = 0

    @property
    def ok(self) -> bool:
        return not self.mismatches and self.token_in_counted == self.token_in_extends == self.token_in

    def line(self) -> str:
        verdict = "yes" if self.ok else "NO"
        text = f"{verdict} ({self.equal}/{self.rendered} rendered equal"
        if self.token_in:
            text += f"; token-in {self.token_in_counted}/{self.token_in} counted by the server"
            text += f", {self.token_in_extends} extend an earlier call"
            text += f", {self.token_in_retokenize_equal} re-tokenize equal"
        return text + ")"


def check_ids(server: VLLMServer, sessions: dict[str, list[CaptureRecord]]) -> IdCheck:
    check = IdCheck()
    for records in sessions.values():
        answered: list[list[int]] = []  # each earlier ok call's prompt + sampled ids
        for r in records:
            if r.status != "ok" or r.normalized is None:
                continue
            answered.append([*r.prompt_ids, *r.response_ids])
            ids = list(r.prompt_ids)
            usage = (r.response or {}).get("usage") or {}
            where = f"{r.session_id} call {r.seq}"
            if r.prompt_mode == "token_in":
                check.token_in += 1
                if any(ids[: len(earlier)] == earlier for earlier in answered[:-1]):
                    check.token_in_extends += 1
                else:
                    check.mismatches.append(f"{where}: token-in ids extend no earlier call's prompt + answer")
                if usage.get("prompt_tokens") == len(ids):
                    check.token_in_counted += 1
                else:
                    check.mismatches.append(
                        f"{where}: token-in prompt_tokens {usage.get('prompt_tokens')} != {len(ids)}"
                    )
                if server_tokenize(server, r.normalized) == ids:
                    check.token_in_retokenize_equal += 1
                continue
            check.rendered += 1
            theirs = server_tokenize(server, r.normalized)
            if theirs == ids:
                check.equal += 1
            else:
                at = next(
                    (i for i, (a, b) in enumerate(zip(ids, theirs, strict=False)) if a != b), min(len(ids), len(theirs))
                )
                check.mismatches.append(
                    f"{where}: {len(ids)} captured vs {len(theirs)} /tokenize, first difference at {at}"
                )
    return check


@dataclass
class HarnessReport:
    harness: str
    sessions: int
    verdicts: Counter[str]
    ids: IdCheck
    calls: int
    overflow_calls: int
    exit_codes: list[Any]
    over_timeout: list[str]
    run_s: list[float] = field(default_factory=list)  # each session's RUN stage (the harness), seconds


def report(server: VLLMServer, out: Path, session_s: float) -> dict[str, HarnessReport]:
    """Per harness: its rows' verdicts by reason code, the id check of its captured calls, its overflowed calls."""
    all_rows = rows(out)
    sessions = read_capture_dir(out / "capture")
    by_harness: dict[str, HarnessReport] = {}
    for name, file_rows in all_rows.items():
        for row in file_rows:
            h = row["harness"]
            rep = by_harness.setdefault(h, HarnessReport(h, 0, Counter(), IdCheck(), 0, 0, [], []))
            rep.sessions += 1
            rep.verdicts["accepted" if name == "corpus" else f"{name[:-1]}:{reason_code(row)}"] += 1
            rep.exit_codes.append(row.get("exit_code"))
            rep.run_s.append(float((row.get("timing") or {}).get("run") or 0.0))
            if (spent := session_seconds(row)) > session_s + SESSION_MARGIN_S:
                rep.over_timeout.append(f"{row['key']}: {spent:.0f} s")
            records = sessions.get(row["session_id"], [])
            rep.calls += len(records)
            rep.overflow_calls += sum(1 for r in records if r.error_kind == "context_length")
            sub = check_ids(server, {row["session_id"]: records})
            for attr in (
                "rendered",
                "equal",
                "token_in",
                "token_in_counted",
                "token_in_extends",
                "token_in_retokenize_equal",
            ):
                setattr(rep.ids, attr, getattr(rep.ids, attr) + getattr(sub, attr))
            rep.ids.mismatches += sub.mismatches
    return by_harness


def unknown_reasons(out: Path) -> list[str]:
    all_rows = rows(out)
    return [
        f"{row['key']}: {row['reason']}"
        for name in ("rejects", "errors")
        for row in all_rows[name]
        if reason_code(row) not in REASONS
    ]


@dataclass
class Overflow:
    """What a harness did after the gateway answered a call with a context overflow."""

    key: str
    calls: int
    first_overflow: int  # index of the first refused call
    overflows: int  # refused calls in all
    later_ok: int  # calls answered after the first refusal (compaction or a shorter request that fit)
    messages: list[int]  # the refused calls' message counts: equal counts are the same request retried
    exit_code: Any
    last_line: str


def overflows(out: Path) -> list[Overflow]:
    sessions = read_capture_dir(out / "capture")
    found = []
    for name, file_rows in rows(out).items():
        for row in file_rows:
            records = sessions.get(row["session_id"], [])
            refused = [i for i, r in enumerate(records) if r.error_kind == "context_length"]
            if not refused:
                continue
            log = out / "artifacts" / row["session_id"] / "harness-output.log"
            text = log.read_text(errors="replace").strip() if log.exists() else ""
            found.append(
                Overflow(
                    key=f"{row['key']} ({name}: {row.get('reason') or 'accepted'})"[:160],
                    calls=len(records),
                    first_overflow=refused[0],
                    overflows=len(refused),
                    later_ok=sum(1 for r in records[refused[0] :] if r.status == "ok"),
                    messages=[
                        len((records[i].normalized or records[i].request).get("messages") or []) for i in refused
                    ],
                    exit_code=row.get("exit_code"),
                    last_line=(text.splitlines() or [""])[-1][-300:],
                )
            )
    return found
