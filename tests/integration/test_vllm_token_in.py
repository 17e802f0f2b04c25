"""Token-in on the REAL vLLM (CPU build): exact prompt ids on the chat route, with the server's parsers still running.

The tiny random-weight Qwen3 (real Qwen3 tokenizer and official template) of the shared session fixture, served with
``--enable-auto-tool-choice --tool-call-parser hermes --reasoning-parser qwen3``. A call that continues an earlier one
is sent as that call's prompt ids + its sampled ids + the local rendering of only the new messages, in
``kv_transfer_params.prompt_token_ids`` (polar_cli/translate/token_in.py). The module shows that:

- the rendered suffix tokenizes to the same ids locally (transformers, on the model directory) as on the server;
- the server runs exactly the ids sent and returns sampled ids with one logprob each;
- its hermes tool-call parser and qwen3 reasoning parser run on the output of such a call.

Needs .venv-vllm and the models under .cache/models (scripts/setup-tests); a missing part is an error.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import httpx
import pytest

from polar_cli.translate.dialects import VLLM
from polar_cli.translate.ir import ChatRequest, Message, Sampling, Text, Tool, ToolCall, ToolChoice
from polar_cli.translate.token_in import continuation_ids, prompt_mismatch, token_in_request
from polar_cli.translate.upstream import UpstreamAnswer, UpstreamOptions, chat_body, parse_answer
from tests.support.models import QWEN3_TINY_DIR
from tests.support.vllm_server import VLLMServer

pytestmark = pytest.mark.integration

IM_END = "<|im_end|>"
IM_END_ID, ENDOFTEXT_ID, THINK_END_ID = 151645, 151643, 151668
WEATHER = Tool(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CITIES = ("Paris", "Rome", "Oslo")
# A random-weight model calls a tool only when made to: a structured-output regex (as a deployment could add to every
# call) makes each answer a well-formed hermes call, ended by <|im_end|> (<|endoftext|> banned). With thinking off the
# generation prompt holds an empty think block, so the regex applies from the first sampled token.
FORCE_TOOL_CALL = {
    "structured_outputs": {
        "regex": r'<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "(Paris|Rome|Oslo)"\}\}\n</tool_call>'
    },
    "logit_bias": {str(ENDOFTEXT_ID): -100},
}
NO_THINKING = {"enable_thinking": False}


@cache
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(QWEN3_TINY_DIR))


def options(server: VLLMServer, **fields: Any) -> UpstreamOptions:
    return UpstreamOptions(dialect=VLLM, model=server.served_model_name, **fields)


def render(body: dict[str, Any], messages: list[dict[str, Any]], *, generation_prompt: bool) -> str:
    # vLLM renders a missing content (an assistant turn of tool calls only) as ""; the template needs a string
    messages = [{**m, "content": m.get("content") or ""} for m in messages]
    text: str = tokenizer().apply_chat_template(
        messages,
        tools=body.get("tools"),
        tokenize=False,
        add_generation_prompt=generation_prompt,
        **body.get("chat_template_kwargs", {}),
    )
    return text


def rendered_suffix(body: dict[str, Any], answered: int) -> str:
    """The template's text for the messages after the first `answered`, from right after the last sampled id.

    `answered` counts the messages the previous call's prompt and sampled ids stand for: its messages and the
    assistant turn it sampled. Qwen3 renders an assistant turn differently once it is no longer the last message (its
    think block goes), so the earlier rendering is no prefix of the new one; the cut is after those turns' own
    ``<|im_end|>`` markers.
    """
    before = render(body, body["messages"][:answered], generation_prompt=False)
    full = render(body, body["messages"], generation_prompt=True)
    cut = 0
    for _ in range(before.count(IM_END)):
        cut = full.index(IM_END, cut) + len(IM_END)
    return full[cut:]


def local_ids(text: str) -> list[int]:
    ids: list[int] = tokenizer().encode(text, add_special_tokens=False)
    return ids


def server_tokenize(server: VLLMServer, text: str) -> list[int]:
    body = {"model": server.served_model_name, "prompt": text, "add_special_tokens": False}
    resp = httpx.post(server.url + "/tokenize", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    tokens: list[int] = resp.json()["tokens"]
    return tokens


def post(server: VLLMServer, path: str, body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(server.url + path, json=body, timeout=300)
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


def assert_sampled_with_logprobs(data: dict[str, Any], answer: UpstreamAnswer) -> None:
    choice = data["choices"][0]
    assert answer.tokens.response_ids == choice["token_ids"]
    assert len(answer.tokens.response_ids) == data["usage"]["completion_tokens"] > 0
    assert len(answer.tokens.response_logprobs) == len(answer.tokens.response_ids)
    assert all(lp <= 0.0 for lp in answer.tokens.response_logprobs)


def tool_request(messages: list[Message]) -> ChatRequest:
    return ChatRequest(
        model="some-harness-model",
        messages=tuple(messages),
        tools=(WEATHER,),
        tool_choice=ToolChoice(mode="auto"),
        sampling=Sampling(max_tokens=60, temperature=0.0),
    )


def test_token_in_tool_session_runs_the_exact_ids_and_parses_tool_calls(qwen3_tiny: VLLMServer) -> None:
    server = qwen3_tiny
    opts = options(server, chat_template_kwargs=NO_THINKING, extra_body=FORCE_TOOL_CALL)
    messages = [
        Message(role="system", content=(Text("You are a weather bot."),)),
        Message(role="user", content=(Text("Weather in Paris, Rome and Oslo?"),)),
    ]
    # turn 0 goes as messages, rendered by the server, as every first call of a session does
    data = post(server, "/v1/chat/completions", chat_body(tool_request(messages), opts, rid="t0"))
    answer = parse_answer(data, {"get_weather": "function"})
    assert_sampled_with_logprobs(data, answer)
    for turn in (1, 2):
        call = answer.tool_calls[0]
        assert call.name == "get_weather", f"turn {turn - 1}: {data['choices'][0]['message']}"
        assert answer.tokens.response_ids[-1] == IM_END_ID  # a whole turn: the continuation starts after it
        answered = len(messages) + 1  # the messages of the previous call and the assistant turn it sampled
        messages += [
            Message(
                role="assistant", tool_calls=(ToolCall(id=f"call_{turn}", name=call.name, arguments=call.arguments),)
            ),
            Message(role="tool", tool_call_id=f"call_{turn}", content=(Text(f"result {turn}: 18C, cloudy"),)),
        ]
        body = chat_body(tool_request(messages), opts, rid=f"t{turn}")
        suffix = rendered_suffix(body, answered)
        assert suffix.startswith("\n<|im_start|>user\n<tool_response>\n")
        assert suffix.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        # (a) the local rendering of the new messages tokenizes as the server tokenizes it
        suffix_ids = local_ids(suffix)
        assert suffix_ids == server_tokenize(server, suffix)
        sent = continuation_ids(answer.tokens, suffix_ids)
        path, token_body = token_in_request(VLLM, body, sent)
        data = post(server, path, token_body)
        answer = parse_answer(data, {"get_weather": "function"})
        # (b) exactly the ids sent, and sampled ids with logprobs back
        assert prompt_mismatch(sent, answer.tokens) is None
        assert data["usage"]["prompt_tokens"] == len(sent)
        assert_sampled_with_logprobs(data, answer)
        # (c) the server's hermes parser turned the sampled text into a tool call
        message = data["choices"][0]["message"]
        assert message["tool_calls"], f"turn {turn}: no tool call in {message}"
        assert answer.finish_reason == "tool_calls"
        assert [c.name for c in answer.tool_calls] == ["get_weather"]
        assert answer.tool_calls[0].arguments in {f'{{"city": "{c}"}}' for c in CITIES}
        assert "<tool_call>" not in (message["content"] or "")
        # what token-in is for: the server, left to render the history, would not have fed these ids (Qwen3's
        # template drops the empty think block of the earlier turn the model saw) ...
        rendered = post(
            server,
            "/tokenize",
            {
                "model": server.served_model_name,
                "messages": body["messages"],
                "tools": body["tools"],
                "chat_template_kwargs": NO_THINKING,
                "add_generation_prompt": True,
            },
        )["tokens"]
        assert rendered != sent
        # ... while its own rendering of the new messages is the suffix rendered here
        assert rendered[-len(suffix_ids) :] == suffix_ids


def test_token_in_output_goes_through_the_reasoning_parser(qwen3_tiny: VLLMServer) -> None:
    server = qwen3_tiny
    request = ChatRequest(
        model="m",
        messages=(Message(role="user", content=(Text("Hi"),)),),
        sampling=Sampling(max_tokens=12, temperature=0.0),
    )
    # thinking on: the generation prompt ends with "assistant\n"
    prompt_text = render({}, [{"role": "user", "content": "Hi"}], generation_prompt=True)
    # what an earlier call of the session saw and sampled (a think block and an answer), then a new user turn
    sent = [
        *local_ids(prompt_text + "<think>\nfirst\n</think>\n\nOK" + IM_END),
        *local_ids("\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n"),
    ]
    # no </think> sampled: the qwen3 parser files the whole output as reasoning
    body = chat_body(request, options(server, extra_body={"logit_bias": {str(THINK_END_ID): -100}}), rid="r0")
    data = post(server, *token_in_request(VLLM, body, sent))
    answer = parse_answer(data, {})
    assert prompt_mismatch(sent, answer.tokens) is None
    assert_sampled_with_logprobs(data, answer)
    assert THINK_END_ID not in answer.tokens.response_ids
    assert answer.reasoning == tokenizer().decode(answer.tokens.response_ids)
    assert answer.text == ""
    assert answer.usage.reasoning_tokens == len(answer.tokens.response_ids)
    # </think> first (forced by a bias), then a regex (structured outputs start once reasoning ends): the parser
    # strips the end marker and files what follows as content
    force = {
        "logit_bias": {str(THINK_END_ID): 100, str(ENDOFTEXT_ID): -100},
        "structured_outputs": {"regex": r"\n\nHello there\."},
    }
    body = chat_body(request, options(server, extra_body=force), rid="r1")
    data = post(server, *token_in_request(VLLM, body, sent))
    answer = parse_answer(data, {})
    assert prompt_mismatch(sent, answer.tokens) is None
    assert_sampled_with_logprobs(data, answer)
    assert answer.tokens.response_ids[0] == THINK_END_ID and answer.tokens.response_ids[-1] == IM_END_ID
    assert tokenizer().decode(answer.tokens.response_ids) == "</think>\n\nHello there.<|im_end|>"
    assert answer.reasoning is None
    assert answer.text.strip() == "Hello there."
