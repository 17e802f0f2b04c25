"""The judge against the REAL vLLM CPU server with a real small model (SmolLM2-135M-Instruct, tests/support/models.py).

A 135M model is a poor reviewer, so what is asserted is the contract, not the verdict: every chunk's answer parses
into scores inside the rubric's range, or the judge ends in a clean `JudgeError` (retryable, never a score); every
call, answered or not, is one line of judge.jsonl with its whole request, and nothing reaches a capture store; the
prompt's hash is the same when the same session is judged again. With ``structured`` on, vLLM constrains decoding
to the answer's JSON schema, so a small model's answer parses; with it off, the model's free text goes through the
parsing rules. Needs .venv-vllm and the models (scripts/setup-tests): a missing part fails, never skips.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from polar_cli.judge.client import Judge, JudgeError, JudgeResult
from polar_cli.judge.config import JudgeConfig
from polar_cli.judge.prompt import sha256_json
from polar_cli.judge.rubric import load_rubric
from polar_cli.trajectory import prefix_merging
from tests.support.vllm_server import VLLMServer
from tests.unit.judge.judge_support import RUBRIC_YAML, session

pytestmark = pytest.mark.integration


def judge_of(server: VLLMServer, tmp_path: Path, **kw: Any) -> Judge:
    rubric = tmp_path / "rubric.yaml"
    rubric.write_bytes(RUBRIC_YAML)
    config = JudgeConfig(rubric=str(rubric), url=server.url + "/v1", model=server.served_model_name, **kw)
    return Judge.open(config, None, "unused")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def judged(judge: Judge, record: Path) -> JudgeResult | JudgeError:
    records = session()
    try:
        return await judge.score(prefix_merging(records, 2).traces, records, record)
    except JudgeError as exc:
        return exc
    finally:
        await judge.close()


def test_structured_scores_are_in_range_recorded_apart_and_reproducible(smollm2: VLLMServer, tmp_path: Path) -> None:
    # small chunks: the session is scored in several parts, each its own call
    settings = {"max_tokens": 160, "retries": 2, "chunk_chars": 1000, "tool_output_chars": 900, "message_chars": 900}
    judge = judge_of(smollm2, tmp_path, **settings)
    record = tmp_path / "artifacts" / "s" / "judge.jsonl"
    outcome = asyncio.run(judged(judge, record))
    calls = lines(record)
    print("structured:", outcome, [(c["status"], c.get("error"), c.get("scores")) for c in calls])
    assert calls and all(c["request"]["model"] == "smollm2" and c["request"]["messages"] for c in calls)
    assert all(c["status"] in ("ok", "error") for c in calls)
    requests, _sizes = judge_of(smollm2, tmp_path, **settings).prompts(prefix_merging(session(), 2).traces, session())
    assert len(requests) >= 2
    if isinstance(outcome, JudgeError):  # clean and retryable: every call recorded, none made a score
        assert len(calls) == 3 * len(requests) or any(c["status"] == "ok" for c in calls)
        return
    assert outcome.calls == len(calls) and len(outcome.chunk_scores) == len(requests)
    assert all(0 <= v <= 10 for chunk in outcome.chunk_scores for v in chunk.values())
    assert all(0.0 <= v <= 1.0 for v in outcome.criteria.values()) and 0.0 <= outcome.score <= 1.0
    assert outcome.rubric_sha256 == load_rubric(tmp_path / "rubric.yaml").sha256
    # the judge's prompts, rebuilt from the same session, hash the same; they are what was sent
    assert outcome.prompt_sha256 == sha256_json(requests)
    sent = [c["request"]["messages"] for c in calls if c["status"] == "ok"]
    assert sent == requests


def test_free_text_answers_parse_or_fail_cleanly(smollm2: VLLMServer, tmp_path: Path) -> None:
    judge = judge_of(smollm2, tmp_path, max_tokens=96, retries=1, structured=False)
    record = tmp_path / "judge.jsonl"
    outcome = asyncio.run(judged(judge, record))
    calls = lines(record)
    print("free text:", outcome, [(c["status"], c.get("error")) for c in calls])
    assert calls and "response_format" not in calls[0]["request"]
    if isinstance(outcome, JudgeError):
        assert "unscored after" in str(outcome) and [c["status"] for c in calls] == ["error", "error"]
        assert all(c.get("error") for c in calls)
    else:
        assert 0.0 <= outcome.score <= 1.0 and outcome.calls == len(calls)


def test_the_runs_own_engine_answers_the_judge_directly(smollm2: VLLMServer, tmp_path: Path) -> None:
    """``judge.url`` unset: the engine's own upstream client (what the gateway calls) answers, bypassing the gateway."""
    from polar_cli.gateway.upstream_client import UpstreamClient

    rubric = tmp_path / "rubric.yaml"
    rubric.write_bytes(RUBRIC_YAML)
    upstream = UpstreamClient(smollm2.url, timeout=300)
    judge = Judge.open(JudgeConfig(rubric=str(rubric), max_tokens=160, retries=2), upstream, "smollm2")
    assert judge.endpoint == "engine" and judge.model == "smollm2"
    record = tmp_path / "judge.jsonl"

    async def go() -> JudgeResult | JudgeError:
        try:
            return await judged(judge, record)
        finally:
            await upstream.close()

    outcome = asyncio.run(go())
    calls = lines(record)
    assert calls and all(c["endpoint"] == "engine" for c in calls)
    if isinstance(outcome, JudgeResult):
        assert 0.0 <= outcome.score <= 1.0 and outcome.calls == len(calls) and outcome.endpoint == "engine"
    else:
        assert "unscored after" in str(outcome)
