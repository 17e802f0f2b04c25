"""Token-in calls: the field each dialect takes the ids in, what is refused, and how an ignored id list is seen."""

from __future__ import annotations

from typing import Any

import pytest

from polar_cli.translate.dialects import SGLANG, SGLANG_LEGACY, VLLM
from polar_cli.translate.ir import ChatRequest, Image, Message, Sampling, Text, Tool, ToolChoice
from polar_cli.translate.token_in import (
    CHAT_PATH,
    continuation_ids,
    prompt_mismatch,
    refusal,
    token_in_request,
)
from polar_cli.translate.upstream import TokenCapture, UpstreamOptions, chat_body, parse_answer

IDS = [151644, 872, 198, 13048, 151645, 198, 151644, 77091, 198]


def _request(*messages: Message) -> ChatRequest:
    return ChatRequest(
        model="claude-x",
        messages=messages or (Message(role="user", content=(Text("hi"),)),),
        tools=(Tool(name="get_weather", parameters={"type": "object", "properties": {}}),),
        tool_choice=ToolChoice(mode="auto"),
        sampling=Sampling(max_tokens=16, temperature=0.0),
    )


def _body(dialect: Any, **options: Any) -> dict[str, Any]:
    return chat_body(_request(), UpstreamOptions(dialect=dialect, model="m", **options), rid="r-1")


def test_the_dialects_name_their_token_in_field() -> None:
    assert SGLANG.token_in_field == "input_ids"
    assert VLLM.token_in_field == "kv_transfer_params.prompt_token_ids"
    assert SGLANG_LEGACY.token_in_field is None


def test_sglang_takes_the_ids_as_input_ids_and_keeps_everything_else() -> None:
    body = _body(SGLANG, chat_template_kwargs={"enable_thinking": False})
    path, sent = token_in_request(SGLANG, body, IDS)
    assert path == CHAT_PATH == "/v1/chat/completions"
    assert sent == {**body, "input_ids": IDS}
    # the parsers' inputs stay: messages, tools, tool_choice, the template kwargs, rid and the capture flags
    assert sent["messages"] == body["messages"] and sent["tools"] == body["tools"]
    assert sent["rid"] == "r-1" and sent["return_token_ids"] is True
    assert "input_ids" not in body  # the chat body is not changed


def test_vllm_takes_the_ids_in_kv_transfer_params() -> None:
    body = _body(VLLM)
    path, sent = token_in_request(VLLM, body, IDS)
    assert path == CHAT_PATH
    assert sent == {**body, "kv_transfer_params": {"prompt_token_ids": IDS}}
    assert "input_ids" not in sent and "rid" not in sent


def test_vllm_keeps_kv_transfer_params_a_recipe_set() -> None:
    body = _body(VLLM, extra_body={"kv_transfer_params": {"do_remote_prefill": False, "prompt_token_ids": [1]}})
    _, sent = token_in_request(VLLM, body, IDS)
    assert sent["kv_transfer_params"] == {"do_remote_prefill": False, "prompt_token_ids": IDS}
    assert body["kv_transfer_params"] == {"do_remote_prefill": False, "prompt_token_ids": [1]}


def test_the_ids_are_copied() -> None:
    ids = list(IDS)
    _, sent = token_in_request(SGLANG, _body(SGLANG), ids)
    ids.append(7)
    assert sent["input_ids"] == IDS


def test_a_dialect_without_token_in_is_refused() -> None:
    body = _body(SGLANG_LEGACY)
    assert refusal(SGLANG_LEGACY, body) == "the sglang-legacy dialect has no token-in route"
    with pytest.raises(ValueError, match="no token-in route"):
        token_in_request(SGLANG_LEGACY, body, IDS)


@pytest.mark.parametrize("dialect", [SGLANG, VLLM])
def test_a_body_with_an_image_is_refused(dialect: Any) -> None:
    # vLLM would render the messages instead of taking the ids, SGLang would drop the image
    message = Message(role="user", content=(Text("what is this?"), Image(url="data:image/png;base64,AAAA")))
    body = chat_body(_request(message), UpstreamOptions(dialect=dialect), rid="r")
    assert isinstance(body["messages"][0]["content"], list)
    assert refusal(dialect, body) == "a message carries non-text content, which the ids cannot carry"
    with pytest.raises(ValueError, match="non-text content"):
        token_in_request(dialect, body, IDS)


def test_text_parts_are_not_media() -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"text": "b"}]}]}
    assert refusal(VLLM, body) is None


def test_echo_is_refused() -> None:
    assert (
        refusal(VLLM, {**_body(VLLM), "echo": True}) == "echo makes vLLM render the messages instead of taking the ids"
    )


@pytest.mark.parametrize("ids", [[], [1, -2], [1, True], [1, 2.0]])
def test_ids_that_are_no_token_ids_are_refused(ids: list[Any]) -> None:
    with pytest.raises(ValueError, match="non-negative integers"):
        token_in_request(VLLM, _body(VLLM), ids)


def test_continuation_is_previous_prompt_then_sampled_then_suffix() -> None:
    previous = TokenCapture(
        prompt_ids=[1, 2, 3], response_ids=[4, 5], response_logprobs=[-0.1, -0.2], finish_reason="stop"
    )
    assert continuation_ids(previous, [6, 7]) == [1, 2, 3, 4, 5, 6, 7]


def _capture(prompt: list[int]) -> TokenCapture:
    return TokenCapture(prompt_ids=prompt, response_ids=[9], response_logprobs=[-0.5], finish_reason="stop")


def test_prompt_mismatch() -> None:
    assert prompt_mismatch(IDS, _capture(list(IDS))) is None
    assert prompt_mismatch(tuple(IDS), _capture(list(IDS))) is None
    assert prompt_mismatch(IDS, _capture([*IDS[:3], 0, *IDS[4:]])) == (
        "the server ran 9 prompt ids for the 9 sent, first different at index 3"
    )
    # the server rendered something longer (e.g. the messages, with a system prompt)
    assert prompt_mismatch(IDS, _capture([*IDS, 5])) == (
        "the server ran 10 prompt ids for the 9 sent, first different at index 9"
    )
    assert (
        prompt_mismatch(IDS, _capture(IDS[:4]))
        == "the server ran 4 prompt ids for the 9 sent, first different at index 4"
    )


def test_a_vllm_token_in_answer_is_read_by_parse_answer() -> None:
    # vLLM answers a token-in call in the plain chat shape (prompt ids top-level, sampled ids in choices[0])
    answer = {
        "prompt_token_ids": IDS,
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning": None,
                    "tool_calls": [
                        {
                            "id": "t",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
                "token_ids": [151657, 198, 151658, 151645],
                "logprobs": {"content": [{"logprob": -0.1}, {"logprob": -0.2}, {"logprob": -0.3}, {"logprob": 0.0}]},
                "kv_transfer_params": None,
            }
        ],
        "usage": {"prompt_tokens": len(IDS), "completion_tokens": 4},
    }
    parsed = parse_answer(answer, {"get_weather": "function"})
    assert prompt_mismatch(IDS, parsed.tokens) is None
    assert parsed.tokens.response_ids == [151657, 198, 151658, 151645]
    assert [c.name for c in parsed.tool_calls] == ["get_weather"]
    assert parsed.finish_reason == "tool_calls"
