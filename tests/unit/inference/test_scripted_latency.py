"""``engine.latency``: each scripted answer takes that long (a stand-in for a model), cancellably; other kinds refuse
it, and `open_engine` hands it to the scripted engine."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError

from polar_cli.config import EngineConfig
from polar_cli.inference.engines import open_engine
from polar_cli.inference.gold import NoopPolicy
from polar_cli.inference.scripted import ScriptedUpstream
from polar_cli.inference.tokenizers import ChatTokenizer
from tests.support.models import QWEN3_TINY_DIR

BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "logprobs": True})


async def _timed(engine: ScriptedUpstream) -> float:
    start = time.perf_counter()
    response = await engine.post_json("/v1/chat/completions", BODY, session="k")
    assert response.status == 200
    return time.perf_counter() - start


def test_a_scripted_answer_takes_the_configured_latency(qwen3: ChatTokenizer) -> None:
    slow = ScriptedUpstream(NoopPolicy(), qwen3, "m", latency=0.3)
    fast = ScriptedUpstream(NoopPolicy(), qwen3, "m")

    async def run() -> tuple[float, float, float]:
        await _timed(fast)  # warm the template
        fast_s, slow_s = await _timed(fast), await _timed(slow)
        start = time.perf_counter()
        await asyncio.gather(_timed(slow), _timed(slow))
        return fast_s, slow_s, time.perf_counter() - start

    fast_s, slow_s, both_s = asyncio.run(run())
    assert slow_s >= 0.3 and fast_s < 0.3
    # two calls at once take the latency once, not twice: the wait does not hold the event loop
    assert both_s < 0.55


def test_the_latency_wait_is_cancellable(qwen3: ChatTokenizer) -> None:
    slow = ScriptedUpstream(NoopPolicy(), qwen3, "m", latency=30)

    async def run() -> float:
        call = asyncio.create_task(slow.post_json("/v1/chat/completions", BODY, session="k"))
        await asyncio.sleep(0.05)
        start = time.perf_counter()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return time.perf_counter() - start

    assert asyncio.run(run()) < 1


def test_latency_is_only_for_the_scripted_engines() -> None:
    assert EngineConfig(kind="gold", tokenizer="qwen3", latency=0.5).latency == 0.5
    assert EngineConfig(kind="noop", tokenizer="qwen3").latency == 0.0
    with pytest.raises(ValidationError, match="latency is for the scripted engines"):
        EngineConfig(kind="vllm", url="http://x:1", latency=0.5)
    with pytest.raises(ValidationError):
        EngineConfig(kind="gold", tokenizer="qwen3", latency=-1)


def test_open_engine_hands_the_latency_to_the_scripted_engine(tmp_path: Path) -> None:
    config = EngineConfig(kind="noop", tokenizer=str(QWEN3_TINY_DIR), latency=0.01)

    async def run() -> float:
        handle = await open_engine(config, tmp_path)
        try:
            assert handle.scripted is not None
            return handle.scripted.latency
        finally:
            await handle.close()

    assert asyncio.run(run()) == 0.01
