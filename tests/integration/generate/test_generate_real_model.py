"""`polar generate` with ``engine.kind=vllm`` against the REAL vLLM CPU server and small real models, real harnesses,
real containers, real grading, on the demo set (issue 13).

Whatever the model does (garbage text, ``max_tokens`` hit at every answer, a prompt over its context), every session
ends with a verdict: exactly one row per planned key, in corpus or rejects (never errors: nothing here is the
machinery's fault, so the run exits 0), every reason code from `generate.rows.REASONS`, no session past its
``timeouts.session``, and every captured prompt id list equal to the server's own ``/tokenize`` of the same normalized
request. Three servers (tests/support/real_model.py):

- the tiny random-weight Qwen3 (real Qwen3 tokenizer and template, hermes tool parser) at its own 4,096 tokens (the
  shared ``qwen3_tiny`` fixture): Claude Code's first prompt (~12K tokens with its 12 tool schemas rendered) does not
  fit, and its rows say ``context_overflow``; Pi's (~1.5K) does;
- the same model with a 40,960-token context: Claude Code's first prompt is answered;
- SmolLM2-135M-Instruct (real weights, 8K context; its template renders no tools, so Claude Code's first prompt is
  only ~4.6K there): Qwen Code's first prompt is still over 8K (``context_overflow``), Pi's fits.

With token-in on and every answer forced to a `bash` call (so answers end their turn), the continuations Pi sends as
exact ids are what vLLM ran: its ``usage.prompt_tokens`` counts them, and they extend the earlier call's prompt and
sampled ids (re-rendering the history would not give them back: Qwen3's template drops a past turn's empty think
block and the model's JSON spacing).

Every answer is cut at ``engine.max_tokens_cap`` tokens so a model that never stops costs seconds, not minutes. Every
harness on every model: scripts/bench_real_model.py. Needs .venv-vllm and the models (scripts/setup-tests), Docker
and the harness bundles (scripts/setup-docker); a missing part fails, never skips.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from polar_cli.capture import read_capture_dir
from polar_cli.generate.rows import REASONS
from tests.support import real_model as rm
from tests.support.vllm_server import VLLMServer

pytestmark = pytest.mark.integration

INSTANCES = 2
SESSION_S = 180.0
MAX_TOKENS = 64
TIMEOUT_S = 1500


@pytest.fixture(scope="module")
def qwen3_long() -> Iterator[VLLMServer]:
    with rm.qwen3_server(rm.QWEN3_LONG_CONTEXT) as server:
        yield server


@pytest.fixture(scope="module")
def smollm2_tools() -> Iterator[VLLMServer]:
    with rm.smollm2_server() as server:
        yield server


def generate(
    server: VLLMServer, harnesses: list[str], tmp_path: Path, session_s: float = SESSION_S, **recipe: Any
) -> Path:
    """Run the recipe and check what holds whatever the model does; the run directory."""
    out = tmp_path / "run"
    rm.write_recipe(
        tmp_path / "recipe.json",
        server,
        harnesses,
        limit=INSTANCES,
        session_s=session_s,
        max_tokens_cap=MAX_TOKENS,
        **recipe,
    )
    done = rm.run_generate(tmp_path / "recipe.json", out, TIMEOUT_S)
    rows = rm.rows(out)
    # an error row is the machinery failing (Docker, the gateway, the server): none is expected, and it would exit 1
    assert rows["errors"] == [], [r["reason"] for r in rows["errors"]]
    assert done.code == 0, done.stderr[-5000:]
    assert done.summary["pending"] == 0 and done.summary["errors_last_segment"] == 0
    keys = [r["key"] for name in ("corpus", "rejects") for r in rows[name]]
    assert len(keys) == len(set(keys)), "a key has two rows"
    assert set(keys) == rm.planned_keys(harnesses, INSTANCES)
    for row in rows["rejects"]:
        assert rm.reason_code(row) in REASONS, row["reason"]
        assert row["accepted"] is False and row["reward"] == 0.0
    for name in ("corpus", "rejects"):
        for row in rows[name]:
            spent = rm.session_seconds(row)
            assert spent <= session_s + rm.SESSION_MARGIN_S, f"{row['key']} took {spent:.0f} s: {row['timing']}"
    ids = rm.check_ids(server, read_capture_dir(out / "capture"))
    assert ids.mismatches == [], ids.mismatches
    assert ids.rendered >= 1 and ids.equal == ids.rendered
    assert ids.token_in_counted == ids.token_in_extends == ids.token_in
    return out


def by_harness(out: Path, harness: str) -> list[dict[str, Any]]:
    rows = rm.rows(out)
    return [r for name in ("corpus", "rejects") for r in rows[name] if r["harness"] == harness]


def test_qwen3_at_4k_claude_code_overflows_and_pi_fits(qwen3_tiny: VLLMServer, tmp_path: Path) -> None:
    out = generate(qwen3_tiny, ["claude-code", "pi"], tmp_path)
    sessions = read_capture_dir(out / "capture")
    for row in by_harness(out, "claude-code"):
        assert rm.reason_code(row) == "context_overflow" and row["status"] == "CONTEXT_OVERFLOW", row["reason"]
        assert "maximum context length is 4096" in str(row["reason"])
        records = sessions[str(row["session_id"])]
        # the first call is refused and Claude Code gives up ("cannot be compacted"): exit 1, no retry
        assert records[0].error_kind == "context_length" and records[0].status == "upstream_error"
        assert row["exit_code"] == 1
    for row in by_harness(out, "pi"):
        assert rm.reason_code(row) != "context_overflow", row["reason"]
        assert all(r.status == "ok" for r in sessions[str(row["session_id"])])


def test_qwen3_long_context_answers_claude_codes_first_prompt(qwen3_long: VLLMServer, tmp_path: Path) -> None:
    out = generate(qwen3_long, ["claude-code", "mini-swe-agent"], tmp_path)
    sessions = read_capture_dir(out / "capture")
    for row in by_harness(out, "claude-code"):
        assert rm.reason_code(row) != "context_overflow", row["reason"]
        first = sessions[str(row["session_id"])][0]
        assert first.status == "ok" and len(first.prompt_ids) > 8192, "Claude Code's first prompt is over 8K"
    assert all(r.error_kind != "context_length" for records in sessions.values() for r in records)


def test_smollm2_at_8k_qwen_code_overflows_and_pi_fits(smollm2_tools: VLLMServer, tmp_path: Path) -> None:
    out = generate(smollm2_tools, ["pi", "qwen-code"], tmp_path)
    sessions = read_capture_dir(out / "capture")
    for row in by_harness(out, "qwen-code"):
        # even without its tool schemas (SmolLM2's template drops them) Qwen Code's first prompt is over 8K
        assert rm.reason_code(row) == "context_overflow", row["reason"]
        assert "maximum context length is 8192" in str(row["reason"])
        assert sessions[str(row["session_id"])][-1].error_kind == "context_length"
    for row in by_harness(out, "pi"):
        assert rm.reason_code(row) != "context_overflow", row["reason"]
    answered = [r for records in sessions.values() for r in records if r.status == "ok"]
    assert answered and all(len(r.response_ids) <= MAX_TOKENS for r in answered)


def test_qwen3_long_token_in_continuations_are_the_ids_vllm_ran(qwen3_long: VLLMServer, tmp_path: Path) -> None:
    # every answer a call of `bash` (FORCE_BASH), so answers end their turn and the next call continues: token-in
    # sends previous prompt + sampled ids + the new messages, which vLLM runs as given (usage.prompt_tokens); Pi has
    # no step limit and runs until its session timeout, mini-swe-agent stops at its submit line
    out = generate(qwen3_long, ["pi", "mini-swe-agent"], tmp_path, session_s=60.0, token_in=True, engine=rm.FORCE_BASH)
    ids = rm.check_ids(qwen3_long, read_capture_dir(out / "capture"))
    assert ids.token_in >= 2, ids.line()
    for row in by_harness(out, "pi"):
        assert row["stats"]["token_in_calls"] >= 1, row["reason"]
