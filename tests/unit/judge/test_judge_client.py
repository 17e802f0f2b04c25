"""The judge's async shell: one call per chunk, retried on a failed call or an unparsable answer, every call recorded
apart in judge.jsonl; a judge that stays unparsable is a JudgeError (never a score); the transports."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from polar_cli.errors import ConfigError, UpstreamError
from polar_cli.judge.client import (
    EndpointTransport,
    EngineTransport,
    Judge,
    JudgeCallError,
    JudgeError,
    content_of,
)
from polar_cli.judge.config import JudgeConfig
from polar_cli.trajectory import prefix_merging
from polar_cli.wire.http11 import Headers, Response
from tests.unit.judge.judge_support import GOOD, RUBRIC_YAML, ScriptedTransport, answer, rubric, session


def config(tmp_path: Path, **kw: Any) -> JudgeConfig:
    path = tmp_path / "rubric.yaml"
    path.write_bytes(RUBRIC_YAML)
    return JudgeConfig(rubric=str(path), **kw)


def judge(tmp_path: Path, script: list[Any], **kw: Any) -> tuple[Judge, ScriptedTransport]:
    transport = ScriptedTransport(script)
    return Judge(config(tmp_path, **kw), rubric(), transport, "judge-model", "http://judge"), transport


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def score(j: Judge, path: Path) -> Any:
    records = session()
    return asyncio.run(j.score(prefix_merging(records, 2).traces, records, path, "artifacts/s/judge.jsonl"))


def test_a_session_is_scored_and_every_call_recorded_with_its_whole_request(tmp_path: Path) -> None:
    j, transport = judge(tmp_path, [answer("not json"), JudgeCallError("HTTP 503"), answer(GOOD)])
    record = tmp_path / "artifacts" / "s" / "judge.jsonl"
    result = score(j, record)
    assert result.criteria == pytest.approx({"correctness": 0.8, "process": 0.4})
    assert result.score == pytest.approx((0.8 * 3 + 0.4) / 4) and result.calls == 3
    assert result.rubric_sha256 == rubric().sha256 and result.record == "artifacts/s/judge.jsonl"
    calls = lines(record)
    assert [c["status"] for c in calls] == ["error", "error", "ok"] and [c["attempt"] for c in calls] == [0, 1, 2]
    assert "no JSON object" in calls[0]["error"] and calls[1]["error"] == "HTTP 503"
    # the record holds the exact request: its messages hash to the row's prompt_sha256
    assert transport.bodies[0] == calls[2]["request"]
    from polar_cli.judge.prompt import sha256_json

    assert sha256_json([calls[2]["request"]["messages"]]) == result.prompt_sha256
    body = calls[2]["request"]
    assert body["model"] == "judge-model" and body["temperature"] == 0.0 and body["stream"] is False
    assert body["response_format"]["type"] == "json_schema"
    # the same session scored again: the same prompt, the same hash
    again, _ = judge(tmp_path, [answer(GOOD)])
    assert score(again, tmp_path / "again.jsonl").prompt_sha256 == result.prompt_sha256


def test_a_judge_that_never_answers_usably_is_an_error_never_a_score(tmp_path: Path) -> None:
    hostile = [answer('{"scores": {"correctness": 99, "process": 1}}'), JudgeCallError("unreachable"), {"x": 1}]
    j, _ = judge(tmp_path, hostile, retries=2)
    record = tmp_path / "judge.jsonl"
    with pytest.raises(JudgeError, match="chunk 1/1 unscored after 3 calls"):
        score(j, record)
    assert [c["status"] for c in lines(record)] == ["error"] * 3


def test_long_sessions_are_scored_per_chunk_and_combined(tmp_path: Path) -> None:
    low = '{"scores": {"correctness": 0, "process": 0}}'
    j, transport = judge(tmp_path, [answer(GOOD)] + [answer(low)] * 10, chunk_chars=1000, tool_output_chars=900,
                         message_chars=900, chunk_combine="min")  # fmt: skip
    result = score(j, tmp_path / "judge.jsonl")
    assert len(transport.bodies) == len(result.chunk_scores) >= 2
    assert result.criteria == {"correctness": 0.0, "process": 0.0}
    # every chunk carries the task
    assert all("Fix the off-by-one error" in b["messages"][1]["content"] for b in transport.bodies)
    row = result.to_row(1.0)
    assert row["chunks"] == len(result.chunk_scores) and row["passed"] is False and row["reward"] == 0.0


def test_the_row_field_names_the_scores_hashes_and_record(tmp_path: Path) -> None:
    j, _ = judge(tmp_path, [answer(GOOD)], mode="weighted", threshold=0.6)
    row = score(j, tmp_path / "judge.jsonl").to_row(0.0)
    assert row["criteria"]["correctness"] == {"score": 0.8, "weight": 3.0, "reasons": ["fixed"]}
    assert set(row) >= {"score", "rubric_sha256", "prompt_sha256", "model", "endpoint", "record", "reward", "passed"}
    assert row["reward"] == pytest.approx(0.5 * row["score"]) and row["passed"] is False
    assert orjson.dumps(row)


def test_the_endpoint_transport_sends_the_key_and_maps_failures() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if b"down" in request.content:
            return httpx.Response(503, text="overloaded")
        if b"garbage" in request.content:
            return httpx.Response(200, text="<html>")
        return httpx.Response(200, json=answer(GOOD))

    transport = EndpointTransport("https://judge.example/v1", "sk-test", 5.0, httpx.MockTransport(handler))

    async def go() -> None:
        assert content_of(await transport.complete({"m": "ok"})) == GOOD
        with pytest.raises(JudgeCallError, match="HTTP 503"):
            await transport.complete({"m": "down"})
        with pytest.raises(JudgeCallError, match="not JSON"):
            await transport.complete({"m": "garbage"})
        await transport.close()

    asyncio.run(go())
    assert str(seen[0].url) == "https://judge.example/v1/chat/completions"
    assert seen[0].headers["authorization"] == "Bearer sk-test"


def test_the_engine_transport_calls_the_engine_directly() -> None:
    class Engine:
        def __init__(self) -> None:
            self.paths: list[str] = []

        async def post_json(self, path: str, body: bytes, *, session: str | None = None) -> Response:
            self.paths.append(path)
            if b"fail" in body:
                raise UpstreamError("engine down")
            return Response(200, "OK", Headers([]), orjson.dumps(answer(GOOD)), True)

    engine = Engine()
    transport = EngineTransport(engine)  # type: ignore[arg-type]

    async def go() -> None:
        assert content_of(await transport.complete({"m": 1})) == GOOD
        with pytest.raises(JudgeCallError, match="engine down"):
            await transport.complete({"fail": 1})

    asyncio.run(go())
    assert engine.paths[0] == "/v1/chat/completions"


def test_open_reads_the_key_from_the_named_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = config(tmp_path, url="http://judge:8000/v1", model="m", api_key_env="POLAR_TEST_JUDGE_KEY")
    monkeypatch.delenv("POLAR_TEST_JUDGE_KEY", raising=False)
    with pytest.raises(ConfigError, match="POLAR_TEST_JUDGE_KEY"):
        Judge.open(settings, None, "engine-model")
    monkeypatch.setenv("POLAR_TEST_JUDGE_KEY", "sk-1")
    opened = Judge.open(settings, None, "engine-model")
    assert (opened.model, opened.endpoint) == ("m", "http://judge:8000")
    engine = Judge.open(config(tmp_path), object(), "engine-model")  # type: ignore[arg-type]
    assert (engine.model, engine.endpoint) == ("engine-model", "engine")


def test_an_endpoint_that_is_down_is_a_failed_call() -> None:
    transport = EndpointTransport("http://127.0.0.1:1/v1", None, 5.0)

    async def go() -> None:
        with pytest.raises(JudgeCallError, match="ConnectError"):
            await transport.complete({"m": 1})
        await transport.close()

    asyncio.run(go())
