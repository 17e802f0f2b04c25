"""The real vLLM (CPU build) returns the token fields the gateway relies on, for two real chat templates.

Needs .venv-vllm and the models under .cache/models (scripts/setup-tests); a missing part is an error.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.models import QWEN3_TINY_DIR
from tests.support.vllm_server import VLLMServer

pytestmark = pytest.mark.integration

SMOLLM2_IM_END = 2
QWEN3_IM_START, QWEN3_ASSISTANT, NEWLINE = 151644, 77091, 198
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def chat_and_tokenize(server: VLLMServer, body: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    request = {
        "model": server.served_model_name,
        "temperature": 0,
        "logprobs": True,
        "return_token_ids": True,
        **body,
    }
    resp = httpx.post(server.url + "/v1/chat/completions", json=request, timeout=120)
    assert resp.status_code == 200, resp.text
    tokenize = {"model": server.served_model_name, "messages": body["messages"], "add_generation_prompt": True}
    if "tools" in body:
        tokenize["tools"] = body["tools"]
    tok = httpx.post(server.url + "/tokenize", json=tokenize, timeout=60)
    assert tok.status_code == 200, tok.text
    tokens: list[int] = tok.json()["tokens"]
    return resp.json(), tokens


def assert_token_fields(data: dict[str, Any], prompt_tokens: list[int]) -> list[int]:
    choice = data["choices"][0]
    assert data["prompt_token_ids"] == prompt_tokens
    assert data["usage"]["prompt_tokens"] == len(prompt_tokens)
    sampled: list[int] = choice["token_ids"]
    assert len(sampled) == data["usage"]["completion_tokens"] > 0
    assert len(choice["logprobs"]["content"]) == len(sampled)
    assert all(entry["logprob"] <= 0 for entry in choice["logprobs"]["content"])
    return sampled


def test_smollm2_prompt_ids_match_tokenize_and_sampled_ids_match_usage(smollm2: VLLMServer) -> None:
    messages = [{"role": "user", "content": "What is 2+2? Answer in one short sentence."}]
    data, prompt_tokens = chat_and_tokenize(smollm2, {"messages": messages, "max_tokens": 48})
    sampled = assert_token_fields(data, prompt_tokens)
    choice = data["choices"][0]
    # A stop on EOS keeps the EOS id in token_ids (and in completion_tokens), with stop_reason null.
    assert choice["finish_reason"] == "stop"
    assert choice["stop_reason"] is None
    assert sampled[-1] == SMOLLM2_IM_END
    assert "4" in choice["message"]["content"]


def test_qwen3_tiny_with_a_tool_renders_the_official_template(qwen3_tiny: VLLMServer) -> None:
    from transformers import AutoTokenizer

    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    body = {"messages": messages, "tools": [WEATHER_TOOL], "max_tokens": 8}
    data, prompt_tokens = chat_and_tokenize(qwen3_tiny, body)
    sampled = assert_token_fields(data, prompt_tokens)
    assert data["choices"][0]["finish_reason"] == "length"
    assert len(sampled) == 8
    assert prompt_tokens[-3:] == [QWEN3_IM_START, QWEN3_ASSISTANT, NEWLINE]
    rendered = AutoTokenizer.from_pretrained(str(QWEN3_TINY_DIR)).decode(prompt_tokens)
    assert isinstance(rendered, str)
    assert "<tools>\n" in rendered
    assert '"name": "get_weather"' in rendered
    assert rendered.endswith("<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n")
