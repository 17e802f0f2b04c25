"""The SGLang test double: validated with SGLang's own models, exact wire fields, prefix-stable ids."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from sglang.srt.entrypoints.openai.protocol import ChatCompletionResponse

from tests.support import chatml_ids
from tests.support.sglang_double import (
    TEMPLATE_ENV,
    ContextLengthError,
    ErrorReply,
    Reply,
    ScriptItem,
    SGLangDouble,
    ToolCallReply,
)

EOT = 151645
USER = [{"role": "user", "content": "List the files, please."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "ls",
            "description": "List a directory",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


@pytest.fixture(autouse=True)
def chatml_ids_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests pin the ChatML ids, whatever template $POLAR_TEST_TEMPLATE gives the other tiers."""
    monkeypatch.delenv(TEMPLATE_ENV, raising=False)


def chat(up: SGLangDouble, **body: Any) -> httpx.Response:
    payload = {"model": "m", "messages": USER, "logprobs": True, "return_token_ids": True} | body
    return httpx.post(up.url + "/v1/chat/completions", json=payload, timeout=10)


def test_answer_parses_back_with_sglang_response_model() -> None:
    with SGLangDouble([Reply("Here they are.")]) as up:
        resp = chat(up, rid="r-1")
    assert resp.status_code == 200
    parsed = ChatCompletionResponse.model_validate_json(resp.content)
    choice = parsed.choices[0]
    assert parsed.id == "r-1"
    assert choice.message.content == "Here they are."
    assert choice.message.reasoning_content is None
    assert choice.finish_reason == "stop"
    assert choice.matched_stop == EOT
    assert choice.prompt_token_ids == up.tokenize(USER)
    assert choice.response_token_ids is not None
    assert choice.response_token_ids[-1] == EOT
    assert len(choice.response_token_ids) == parsed.usage.completion_tokens == 5  # Here, they, are, ., eot
    assert parsed.usage.prompt_tokens == len(choice.prompt_token_ids)
    assert choice.logprobs is not None
    assert [e.token for e in choice.logprobs.content] == ["Here", " they", " are", ".", "<|im_end|>"]
    assert all(e.logprob < 0 for e in choice.logprobs.content)
    assert up.requests[0].prompt_ids == tuple(up.tokenize(USER))
    assert up.requests[0].headers["content-type"] == "application/json"


def test_wire_json_has_exactly_sglang_0523_choice_keys() -> None:
    with SGLangDouble([Reply("a")]) as up:
        data = chat(up).json()
    assert set(data) == {"id", "object", "created", "model", "choices", "usage", "metadata"}
    assert set(data["choices"][0]) == {
        "index", "message", "logprobs", "finish_reason", "matched_stop", "prompt_token_ids", "response_token_ids",
    }  # fmt: skip
    assert data["metadata"] == {"weight_version": "default"}
    assert set(data["choices"][0]["message"]) == {"role", "content", "reasoning_content"}


def test_request_with_a_wrong_type_is_refused_with_sglang_error_shape() -> None:
    with SGLangDouble(strict=False) as up:
        resp = chat(up, temperature="hot")
    assert resp.status_code == 400
    data = resp.json()
    assert data["object"] == "error"
    assert data["type"] == "Bad Request"
    assert data["code"] == 400
    assert data["param"] is None
    assert data["message"].startswith("1 validation error:\n")
    assert "'loc': ('body', 'temperature')" in data["message"]
    assert len(up.rejections) == 1
    assert up.requests[0].prompt_ids is None


def test_strict_double_fails_the_test_on_rejections() -> None:
    with pytest.raises(AssertionError, match="refused requests"), SGLangDouble() as up:
        chat(up, messages=[{"role": "wizard", "content": "x"}])


def test_non_json_content_type_is_refused() -> None:
    with SGLangDouble(strict=False) as up:
        resp = httpx.post(up.url + "/v1/chat/completions", content=json.dumps({"messages": USER}), timeout=10)
    assert resp.status_code == 400
    assert "Unsupported Media Type" in up.rejections[0].message


def test_stream_with_token_ids_is_refused_like_sglang() -> None:
    with SGLangDouble(strict=False) as up:
        resp = chat(up, stream=True)
    assert resp.status_code == 400
    assert resp.json()["type"] == "BadRequest"
    assert resp.json()["message"].startswith("return_token_ids is not supported with streaming")
    assert len(up.rejections) == 1


def test_growing_conversation_extends_prompt_ids_and_continues_sampled_ids() -> None:
    reply = Reply("Sure.", tool_calls=(ToolCallReply("ls", {"path": "."}),))
    with SGLangDouble([reply, Reply("Two files.")]) as up:
        first = chat(up, tools=TOOLS).json()["choices"][0]
        history = [
            *USER,
            {"role": "assistant", "content": "Sure.", "tool_calls": first["message"]["tool_calls"]},
            {"role": "tool", "tool_call_id": first["message"]["tool_calls"][0]["id"], "content": "a.py b.py"},
        ]
        second = chat(up, messages=history, tools=TOOLS).json()["choices"][0]
    p1, s1, p2 = first["prompt_token_ids"], first["response_token_ids"], second["prompt_token_ids"]
    assert p2[: len(p1)] == p1
    assert p2[len(p1) : len(p1) + len(s1)] == s1
    assert len(p2) > len(p1) + len(s1)
    assert p2 == up.tokenize(history, TOOLS)


def test_tool_call_reply_fields() -> None:
    with SGLangDouble([Reply(tool_calls=(ToolCallReply("ls", {"path": "/tmp"}),))]) as up:
        data = chat(up, tools=TOOLS).json()
    choice = data["choices"][0]
    call = choice["message"]["tool_calls"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["matched_stop"] is None
    assert choice["message"]["content"] == ""
    assert re.fullmatch(r"call_[0-9a-f]{24}", call["id"])
    assert call["index"] == 0
    assert call["function"] == {"name": "ls", "arguments": '{"path": "/tmp"}'}
    assert choice["response_token_ids"][0] == chatml_ids.FIXED_SPECIAL_IDS["<tool_call>"]
    assert choice["response_token_ids"][-1] == EOT


def test_reasoning_reply_counts_reasoning_tokens() -> None:
    with SGLangDouble([Reply("4", reasoning="2+2 is 4")]) as up:
        data = chat(up).json()
    choice = data["choices"][0]
    ids = choice["response_token_ids"]
    assert choice["message"]["reasoning_content"] == "2+2 is 4"
    assert choice["message"]["content"] == "4"
    expected = ids.index(chatml_ids.THINK_END_ID) + 1
    assert data["usage"]["reasoning_tokens"] == expected
    assert data["usage"]["completion_tokens_details"] == {"reasoning_tokens": expected}


def test_finish_by_length_samples_no_end_of_turn_and_reports_meta_info() -> None:
    with SGLangDouble([Reply("one two three", finish="length")]) as up:
        data = chat(up, return_meta_info=True).json()
    choice = data["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["matched_stop"] is None
    assert EOT not in choice["response_token_ids"]
    assert choice["meta_info"]["finish_reason"] == {"type": "length", "length": 3}
    rows = choice["meta_info"]["output_token_logprobs"]
    assert [row[1] for row in rows] == choice["response_token_ids"]
    assert [row[2] for row in rows] == ["one", " two", " three"]


def test_configurable_end_of_turn_id() -> None:
    with SGLangDouble([Reply("hi")], eot_id=248046) as up:
        choice = chat(up).json()["choices"][0]
    assert choice["response_token_ids"][-1] == 248046
    assert choice["matched_stop"] == 248046
    assert 248046 in choice["prompt_token_ids"]


def test_reply_without_token_ids_omits_every_id_field() -> None:
    with SGLangDouble([Reply("hi", token_ids=False)]) as up:
        choice = chat(up, return_meta_info=True).json()["choices"][0]
    assert not {"prompt_token_ids", "response_token_ids", "meta_info"} & set(choice)
    assert len(choice["logprobs"]["content"]) == 2


def test_ids_are_absent_unless_requested() -> None:
    with SGLangDouble([Reply("hi")]) as up:
        choice = chat(up, return_token_ids=False, logprobs=False).json()["choices"][0]
    assert not {"prompt_token_ids", "response_token_ids", "meta_info"} & set(choice)
    assert choice["logprobs"] is None


def test_error_replies_use_sglang_error_shape() -> None:
    script: list[ScriptItem] = [ErrorReply(503, "overloaded", "ServiceUnavailable"), ContextLengthError(8)]
    with SGLangDouble(script) as up:
        first, second = chat(up), chat(up)
    assert first.status_code == 503
    assert first.json() == {
        "object": "error", "message": "overloaded", "type": "ServiceUnavailable", "param": None, "code": 503,
    }  # fmt: skip
    n = len(up.tokenize(USER))
    assert second.status_code == 400
    assert second.json()["message"] == (f"The input ({n} tokens) is longer than the model's context length (8 tokens).")
    assert second.json()["type"] == "BadRequestError"


def test_script_is_consumed_in_order_then_default() -> None:
    with SGLangDouble([Reply("first"), Reply("second")], default=Reply("fallback")) as up:
        texts = [chat(up).json()["choices"][0]["message"]["content"] for _ in range(4)]
    assert texts == ["first", "second", "fallback", "fallback"]
    assert len(up.chat_requests) == 4


def test_unknown_fields_are_recorded_not_refused() -> None:
    with SGLangDouble() as up:
        assert chat(up, include_reasoning=True).status_code == 200
    assert up.requests[0].unknown_fields == ("include_reasoning",)


def test_recorded_body_is_what_was_sent() -> None:
    # SGLang's "before" validators write defaults (tool_choice) into the dict they validate.
    with SGLangDouble() as up:
        chat(up)
    assert "tool_choice" not in up.requests[0].body
    assert up.requests[0].body["messages"] == USER


def test_legacy_dialect_returns_ids_only_through_prompt_ids_and_meta_info() -> None:
    with SGLangDouble([Reply("hi there")], dialect="sglang-legacy") as up:
        resp = chat(up, return_prompt_token_ids=True, return_meta_info=True)
    choice = resp.json()["choices"][0]
    assert "response_token_ids" not in choice
    assert choice["prompt_token_ids"] == up.tokenize(USER)
    rows = choice["meta_info"]["output_token_logprobs"]
    assert [r[1] for r in rows] == [*(i for i, _ in chatml_ids.text_pieces("hi there")), EOT]
    assert all(isinstance(r[0], float) and isinstance(r[2], str) for r in rows)
    assert choice["meta_info"]["finish_reason"] == {"type": "stop", "matched": EOT}
    assert choice["meta_info"]["completion_tokens"] == len(rows)


def test_vllm_dialect_layout() -> None:
    with SGLangDouble([Reply("4", reasoning="think")], dialect="vllm") as up:
        data = chat(up).json()
    assert set(data) == {
        "id", "object", "created", "model", "choices", "service_tier", "system_fingerprint", "usage",
        "prompt_logprobs", "prompt_token_ids", "prompt_text", "kv_transfer_params", "ec_transfer_params", "metrics",
    }  # fmt: skip
    choice = data["choices"][0]
    assert data["prompt_token_ids"] == up.tokenize(USER)
    assert "prompt_token_ids" not in choice
    assert choice["token_ids"][-1] == EOT
    assert len(choice["token_ids"]) == data["usage"]["completion_tokens"]
    assert choice["stop_reason"] is None
    assert choice["message"]["reasoning"] == "think"
    assert "reasoning_content" not in choice["message"]
    assert "tool_calls" not in choice["message"]


def test_vllm_dialect_errors_are_nested() -> None:
    with SGLangDouble([ContextLengthError(context_len=4)], dialect="vllm", strict=False) as up:
        ctx = chat(up)
        bad = chat(up, messages="x")
    assert ctx.status_code == 400
    assert ctx.json()["error"]["param"] == "input_tokens"
    assert ctx.json()["error"]["message"].startswith("This model's maximum context length is 4 tokens.")
    assert bad.status_code == 400
    assert bad.json()["error"]["type"] == "Bad Request"
    assert bad.json()["error"]["param"] == "body.messages"


def test_health_and_tokenize_routes() -> None:
    with SGLangDouble() as up:
        assert httpx.get(up.url + "/health", timeout=10).status_code == 200
        tok = httpx.post(up.url + "/v1/tokenize", json={"messages": USER}, timeout=10).json()
    assert tok["tokens"] == up.tokenize(USER)
    assert tok["count"] == len(tok["tokens"])
