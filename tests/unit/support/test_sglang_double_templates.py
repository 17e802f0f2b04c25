"""The SGLang double on the real chat templates: prompts rendered as SGLang 0.5.23 renders them, sampled ids that are
the template's own assistant turn, and the answer message SGLang's parsers make of those ids.

The parser check runs on all fourteen templates; the answering tests on `SAMPLED_NAMES`, twelve: GLM-4.6 and
DeepSeek-V3.1 are left out for the reasons `sglang_chat.UNSAMPLED` gives (tests/data/chat_templates/README.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sglang.srt.entrypoints.openai.protocol import ChatCompletionResponse
from sglang.srt.function_call.function_call_parser import FunctionCallParser

from tests.support import templates
from tests.support.sglang_chat import (
    DEFAULT_PARSERS,
    SAMPLED_NAMES,
    UNSAMPLED,
    Refusal,
    SGLangTemplate,
    template_detection,
)
from tests.support.sglang_double import TEMPLATE_ENV, Reply, SGLangDouble, ToolCallReply

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "ls",
            "description": "List a directory",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "depth": {"type": "integer"}},
                "required": ["path"],
            },
        },
    }
]
# SGLang hands the template Tool.model_dump(): the wrapper's unset defer_loading comes along as null
SGLANG_TOOLS = [{**TOOLS[0], "defer_loading": None}]
MESSAGES = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "List /tmp, please."}]
ARGS = {"path": "/tmp", "depth": 2}
LATE_SYSTEM = [{"role": "user", "content": "hi"}, {"role": "system", "content": "late"}]
QWEN_USER = "<|im_start|>user\nList /tmp, please.<|im_end|>\n"
GPT_OSS_CALL = (
    '<|start|>assistant to=functions.ls<|channel|>commentary json<|message|>{"path": "/tmp", "depth": 2}<|call|>'
)
SCRIPT = [
    Reply("", reasoning="I will list it.", tool_calls=(ToolCallReply("ls", ARGS),)),
    Reply("Two files.", reasoning="Short listing."),
]


@dataclass(frozen=True)
class Expected:
    """What the double answers on one template for SCRIPT: sampled text, then the parsed message, per turn."""

    sampled: tuple[str, str]
    content: tuple[str, str]
    reasoning: tuple[str | None, str | None]
    calls: bool = True  # whether SGLang's tool-call parser finds the first turn's call
    kwargs: dict[str, Any] | None = None


QWEN3_5 = Expected(
    (
        "I will list it.\n</think>\n\n<tool_call>\n<function=ls>\n<parameter=path>\n/tmp\n</parameter>\n"
        "<parameter=depth>\n2\n</parameter>\n</function>\n</tool_call><|im_end|>",
        "Short listing.\n</think>\n\nTwo files.<|im_end|>",
    ),
    ("\n\n", "\n\nTwo files."),
    ("I will list it.\n", "Short listing.\n"),
)
EXPECTED = {
    # the generation prompt opens no think block: the model writes <think> itself
    "qwen3": Expected(
        (
            "<think>\nI will list it.\n</think>\n\n<tool_call>\n"
            '{"name": "ls", "arguments": {"path": "/tmp", "depth": 2}}\n</tool_call><|im_end|>',
            "<think>\nShort listing.\n</think>\n\nTwo files.<|im_end|>",
        ),
        ("", "\n\nTwo files."),
        ("\nI will list it.\n", "\nShort listing.\n"),
    ),
    "qwen3.5": QWEN3_5,
    "qwen3.6-unsloth": QWEN3_5,
    "nemotron-3-super+qwen3.5-vocab": Expected(
        (
            "I will list it.\n</think>\n<tool_call>\n<function=ls>\n<parameter=path>\n/tmp\n</parameter>\n"
            "<parameter=depth>\n2\n</parameter>\n</function>\n</tool_call>\n<|im_end|>",
            "Short listing.\n</think>\nTwo files.<|im_end|>",
        ),
        ("\n", "\nTwo files."),
        ("I will list it.\n", "Short listing.\n"),
    ),
    # The template writes the recipient in the role header (`<|start|>assistant to=functions.ls<|channel|>commentary
    # json`); SGLang's gpt-oss parser knows only the channel form a gpt-oss model emits (`<|channel|>commentary
    # to=functions.ls <|constrain|>json`), so the call stays in the content and the turn ends as a stop on <|call|>.
    "gpt-oss+qwen3.5-vocab": Expected(
        (
            "<|channel|>analysis<|message|>I will list it.<|end|>" + GPT_OSS_CALL,
            "<|channel|>analysis<|message|>Short listing.<|end|><|start|>assistant<|channel|>final<|message|>"
            "Two files.<|return|>",
        ),
        (GPT_OSS_CALL, "Two files."),
        ("I will list it.", "Short listing."),
        calls=False,
    ),
    # Gemma renders a thought channel only on tool-call turns; with thinking on, SGLang's gemma4 parser takes an answer
    # that opens no channel for reasoning.
    "gemma-4+qwen3.5-vocab": Expected(
        (
            '<|channel>thought\nI will list it.\n<channel|><|tool_call>call:ls{depth:2,path:<|"|>/tmp<|"|>}<tool_call|>'
            "<|tool_response>",
            "Two files.<turn|>",
        ),
        ("", ""),
        ("I will list it.\n", "Two files."),
        kwargs={"enable_thinking": True},
    ),
    # SGLang auto-detects no tool-call parser for the Mistral family or Llama 3.1 (--tool-call-parser auto leaves
    # calls as text), and their templates render no reasoning
    **dict.fromkeys(
        ("ministral-3+qwen3.5-vocab", "ministral-3-reasoning+qwen3.5-vocab", "devstral-small-2507+qwen3.5-vocab"),
        Expected(
            ('[TOOL_CALLS]ls[ARGS]{"path": "/tmp", "depth": 2}</s>', "Two files.</s>"),
            ('[TOOL_CALLS]ls[ARGS]{"path": "/tmp", "depth": 2}', "Two files."),
            (None, None),
            calls=False,
        ),
    ),
    "llama-3.1+llama3-vocab": Expected(
        ('{"name": "ls", "parameters": {"path": "/tmp", "depth": 2}}<|eot_id|>', "Two files.<|eot_id|>"),
        ('{"name": "ls", "parameters": {"path": "/tmp", "depth": 2}}', "Two files."),
        (None, None),
        calls=False,
    ),
    # Kimi-K2's template renders no reasoning; SGLang's kimi_k2 reasoning parser (detected, reasoning on unless
    # `thinking` is false) takes an answer without </think> for reasoning whole
    "kimi-k2+qwen3.5-vocab": Expected(
        (
            "<|tool_calls_section_begin|><|tool_call_begin|>functions.ls:0<|tool_call_argument_begin|>"
            '{"path": "/tmp", "depth": 2}<|tool_call_end|><|tool_calls_section_end|><|im_end|>',
            "Two files.<|im_end|>",
        ),
        ("", ""),
        (None, "Two files."),
    ),
    "minimax-m2+qwen3.5-vocab": Expected(
        (
            'I will list it.\n</think>\n\n\n<minimax:tool_call>\n<invoke name="ls">\n<parameter name="path">/tmp'
            '</parameter>\n<parameter name="depth">2</parameter>\n</invoke>\n</minimax:tool_call>[e~[',
            "Short listing.\n</think>\n\nTwo files.[e~[",
        ),
        ("\n\n\n", "\n\nTwo files."),
        ("I will list it.\n", "Short listing.\n"),
    ),
}
GENERATION_PROMPTS = {
    "qwen3": "<|im_start|>user\nList /tmp, please.<|im_end|>\n<|im_start|>assistant\n",
    "qwen3.5": "<|im_start|>user\nList /tmp, please.<|im_end|>\n<|im_start|>assistant\n<think>\n",
    "qwen3.6-unsloth": "<|im_start|>user\nList /tmp, please.<|im_end|>\n<|im_start|>assistant\n<think>\n",
    "nemotron-3-super+qwen3.5-vocab": QWEN_USER + "<|im_start|>assistant\n<think>\n",
    "gpt-oss+qwen3.5-vocab": "<|start|>user<|message|>List /tmp, please.<|end|><|start|>assistant",
    "gemma-4+qwen3.5-vocab": "<|turn>user\nList /tmp, please.<turn|>\n<|turn>model\n",
    **dict.fromkeys(
        ("ministral-3+qwen3.5-vocab", "ministral-3-reasoning+qwen3.5-vocab", "devstral-small-2507+qwen3.5-vocab"),
        "[/AVAILABLE_TOOLS][INST]List /tmp, please.[/INST]",
    ),
    "llama-3.1+llama3-vocab": "List /tmp, please.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "kimi-k2+qwen3.5-vocab": "<|im_user|>user<|im_middle|>List /tmp, please.<|im_end|>"
    "<|im_assistant|>assistant<|im_middle|>",
    "minimax-m2+qwen3.5-vocab": "]~b]user\nList /tmp, please.[e~[\n]~b]ai\n<think>\n",
}


def chat(up: SGLangDouble, messages: list[dict[str, Any]], **body: Any) -> httpx.Response:
    payload = {"model": "m", "messages": messages, "tools": TOOLS, "logprobs": True, "return_token_ids": True} | body
    return httpx.post(up.url + "/v1/chat/completions", json=payload, timeout=30)


def test_every_template_has_a_case() -> None:
    assert set(EXPECTED) == set(GENERATION_PROMPTS) == set(SAMPLED_NAMES)
    assert set(SAMPLED_NAMES) | set(UNSAMPLED) == set(templates.NAMES)


@pytest.mark.parametrize("name", templates.NAMES)
def test_default_parsers_are_sglangs_auto_detection(name: str) -> None:
    model = SGLangTemplate(name)
    td = template_detection()
    vocab = dict(model.vocab.specials)

    class Tokenizer:
        def get_vocab(self) -> dict[str, int]:
            return vocab

    force, config = td.detect_reasoning_pattern(model.source)
    tool = td.detect_tool_call_parser(model.source, Tokenizer(), config, force)
    reasoning = td.detect_reasoning_parser(model.source, Tokenizer(), config, force)
    assert (model.tool_call_parser, model.reasoning_parser) == DEFAULT_PARSERS[model.family]
    assert reasoning == model.reasoning_parser
    enum = FunctionCallParser.ToolCallParserEnum
    if tool is None or model.tool_call_parser is None:
        assert tool == model.tool_call_parser
    else:
        assert enum[tool] is enum[model.tool_call_parser]  # Qwen3: "qwen" and "qwen25" are one detector


@pytest.mark.parametrize("name", SAMPLED_NAMES)
def test_two_turn_tool_conversation(name: str) -> None:
    expected = EXPECTED[name]
    tk = templates.tokenizer(name)
    with SGLangDouble(list(SCRIPT), template=name, chat_template_kwargs_default=expected.kwargs) as up:
        first = chat(up, MESSAGES)
        assert first.status_code == 200, first.text
        one = ChatCompletionResponse.model_validate_json(first.content).choices[0]
        calls = [c.model_dump() for c in one.message.tool_calls or []]
        history = [*MESSAGES, {"role": "assistant", "content": one.message.content, "tool_calls": calls or None}]
        history += [{"role": "tool", "tool_call_id": calls[0]["id"], "content": "a.py b.py"}] if calls else []
        history += [] if calls else [{"role": "user", "content": "a.py b.py"}]
        second = chat(up, history)
        assert second.status_code == 200, second.text
        two = ChatCompletionResponse.model_validate_json(second.content).choices[0]
    kwargs = expected.kwargs or {}
    # the prompts: the template on the messages as SGLang prepares them, encoded with the template's vocabulary
    for choice, messages, request in ((one, MESSAGES, up.chat_requests[0]), (two, history, up.chat_requests[1])):
        text = tk.template.render(messages, SGLANG_TOOLS, kwargs)
        assert request.prompt_text == text
        assert choice.prompt_token_ids == tk.vocab.encode(text)
        assert list(request.prompt_ids or ()) == choice.prompt_token_ids
    assert up.chat_requests[0].prompt_text is not None
    assert up.chat_requests[0].prompt_text.endswith(GENERATION_PROMPTS[name])
    # the sampled ids: the template's own rendering of each turn, end-of-turn token included
    for choice, sampled in zip((one, two), expected.sampled, strict=True):
        assert choice.response_token_ids == tk.vocab.encode(sampled)
        assert tk.vocab.decode(choice.response_token_ids) == sampled
        assert choice.logprobs is not None
        rows = choice.logprobs.content
        assert [r.token for r in rows] == [tk.vocab.decode([i]) for i in choice.response_token_ids]
        assert all(r.logprob < 0 for r in rows)
    # the messages: what SGLang's reasoning and tool-call parsers make of those ids
    assert (one.message.content, two.message.content) == expected.content
    assert (one.message.reasoning_content, two.message.reasoning_content) == expected.reasoning
    assert two.message.tool_calls is None
    assert two.finish_reason == "stop"
    assert two.matched_stop == tk.vocab.token_id(expected.sampled[1][-len(tk.eot_tokens[0]) :]) == tk.eot_id
    if expected.calls:
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [("ls", ARGS)]
        assert (one.finish_reason, one.matched_stop) == ("tool_calls", None)
    else:
        assert calls == []
        # the turn stops on its own end token (gpt-oss: <|call|>)
        assert (one.finish_reason, one.matched_stop) == ("stop", tk.vocab.encode(expected.sampled[0])[-1])


@pytest.mark.parametrize("name", SAMPLED_NAMES)
def test_input_ids_are_the_prompt_and_the_messages_still_shape_the_reply(name: str) -> None:
    kwargs = EXPECTED[name].kwargs
    with SGLangDouble(SCRIPT[:1] * 2, template=name, chat_template_kwargs_default=kwargs) as up:
        rendered = chat(up, MESSAGES).json()["choices"][0]
        given = chat(up, MESSAGES, input_ids=[11, 22, 33]).json()
    choice = given["choices"][0]
    assert choice["prompt_token_ids"] == [11, 22, 33]
    assert given["usage"]["prompt_tokens"] == 3
    assert up.chat_requests[1].prompt_ids == (11, 22, 33)
    assert up.chat_requests[1].prompt_text is None
    assert choice["response_token_ids"] == rendered["response_token_ids"]
    for key in ("content", "reasoning_content"):
        assert choice["message"][key] == rendered["message"][key]
    functions = [[c["function"] for c in m.get("tool_calls") or []] for m in (choice["message"], rendered["message"])]
    assert functions[0] == functions[1]


def test_input_ids_are_honoured_with_chatml_ids_too() -> None:
    with SGLangDouble([Reply("hi")], template=None) as up:
        data = chat(up, MESSAGES, input_ids=[5, 6]).json()
    assert data["choices"][0]["prompt_token_ids"] == [5, 6]
    assert up.chat_requests[0].prompt_ids == (5, 6)


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        (LATE_SYSTEM, "System message must be at the beginning."),
        ([{"role": "system", "content": "only rules"}], "No user query found in messages."),
    ],
)  # fmt: skip
def test_qwen3_5_refusal_is_sglangs_400(messages: list[dict[str, Any]], message: str) -> None:
    with SGLangDouble([Reply("kept")], template="qwen3.5", strict=False) as up:
        resp = chat(up, messages)
        after = chat(up, MESSAGES)
    assert resp.status_code == 400
    # serving_chat.py raises ValueError(str(template_error)); serving_base.handle_request answers it as BadRequest
    assert resp.json() == {"object": "error", "message": message, "type": "BadRequest", "param": None, "code": 400}
    assert [r.message for r in up.rejections] == [message]
    assert up.requests[0].prompt_ids is None
    assert after.json()["choices"][0]["message"]["content"] == "\n\nkept"  # the refused call consumed no reply


def test_a_refusal_fails_a_strict_double() -> None:
    refused = pytest.raises(AssertionError, match="System message must be at the beginning")
    with refused, SGLangDouble(template="qwen3.5") as up:
        chat(up, LATE_SYSTEM)


def test_a_history_tool_call_with_unparseable_arguments_is_sglangs_400() -> None:
    call = {"id": "c", "function": {"name": "ls", "arguments": "{"}}
    bad: list[dict[str, Any]] = [*MESSAGES, {"role": "assistant", "tool_calls": [call]}]
    with SGLangDouble(template="qwen3", strict=False) as up:
        resp = chat(up, [*bad, {"role": "tool", "tool_call_id": "c", "content": "x"}])
    assert resp.status_code == 400
    assert resp.json()["message"] == "Assistant tool call function.arguments must be valid JSON."
    assert resp.json()["type"] == "BadRequest"


def test_a_reply_the_template_cannot_express_fails_the_call_and_the_test() -> None:
    # gpt-oss refuses an assistant tool-call turn with both content and thinking
    reply = Reply("text", reasoning="why", tool_calls=(ToolCallReply("ls", ARGS),))
    with SGLangDouble([reply], template="gpt-oss", strict=False) as up:
        resp = chat(up, MESSAGES)
    assert resp.status_code == 500
    assert resp.json()["type"] == "Script"
    assert "Cannot pass both content and thinking" in up.rejections[0].message


def test_finish_by_length_samples_no_end_of_turn() -> None:
    tk = templates.tokenizer("qwen3.5")
    with SGLangDouble([Reply("Partial answer", finish="length")], template="qwen3.5") as up:
        choice = chat(up, MESSAGES, tools=None).json()["choices"][0]
    assert tk.vocab.decode(choice["response_token_ids"]) == "\n</think>\n\nPartial answer"
    assert (choice["finish_reason"], choice["matched_stop"]) == ("length", None)
    assert choice["message"]["content"] == "\n\nPartial answer"


def test_reasoning_effort_reaches_the_template_as_a_kwarg() -> None:
    with SGLangDouble(template="gpt-oss") as up:
        chat(up, MESSAGES, chat_template_kwargs={"reasoning_effort": "high"})
        chat(up, MESSAGES, reasoning_effort="low")
        chat(up, MESSAGES)
    texts = [r.prompt_text or "" for r in up.chat_requests]
    assert ["Reasoning: high" in texts[0], "Reasoning: low" in texts[1], "Reasoning: medium" in texts[2]] == [True] * 3


def test_tool_choice_none_renders_no_tools() -> None:
    with SGLangDouble(template="qwen3.5") as up:
        chat(up, MESSAGES, tool_choice="none")
    assert up.chat_requests[0].prompt_text == templates.template("qwen3.5").render(MESSAGES)


def test_tokenize_route_and_method_render_like_the_chat_path() -> None:
    with SGLangDouble(template="qwen3.5") as up:
        tok = httpx.post(up.url + "/v1/tokenize", json={"messages": MESSAGES, "tools": TOOLS}, timeout=10).json()
        bad = httpx.post(up.url + "/v1/tokenize", json={"messages": [{"role": "system", "content": "x"}]}, timeout=10)
    text = templates.template("qwen3.5").render(MESSAGES, SGLANG_TOOLS)
    assert tok["tokens"] == up.tokenize(MESSAGES, TOOLS) == templates.vocab("qwen3.5").encode(text)
    assert bad.status_code == 400
    assert bad.json()["message"] == "No user query found in messages."
    with pytest.raises(Refusal, match="No user query found"):
        up.tokenize([{"role": "system", "content": "x"}])


def test_the_environment_variable_sets_the_default_template(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEMPLATE_ENV, "qwen3.5")
    assert SGLangDouble().model is not None
    assert SGLangDouble().eot_id == templates.tokenizer("qwen3.5").eot_id
    assert SGLangDouble(template=None).model is None
    monkeypatch.setenv(TEMPLATE_ENV, "")
    assert SGLangDouble().model is None


def test_unknown_parser_names_are_refused_up_front() -> None:
    with pytest.raises(ValueError, match="no tool-call parser 'qwen9'"):
        SGLangDouble(template="qwen3", tool_call_parser="qwen9")
    assert SGLangDouble(template="qwen3", tool_call_parser=None, reasoning_parser=None).model is not None


def test_without_a_reasoning_parser_the_think_block_stays_in_the_content() -> None:
    with SGLangDouble([SCRIPT[1]], template="qwen3", reasoning_parser=None) as up:
        message = chat(up, MESSAGES).json()["choices"][0]["message"]
    assert message["content"] == "<think>\nShort listing.\n</think>\n\nTwo files."
    assert message["reasoning_content"] is None


def test_a_refused_start_up_probe_does_not_fail_a_strict_double() -> None:
    with SGLangDouble(template="qwen3.5") as up:
        resp = chat(up, LATE_SYSTEM, rid="polar-probe-traits-1")
    assert resp.status_code == 400
    assert [(r.message, r.probe) for r in up.rejections] == [("System message must be at the beginning.", True)]


def test_the_vllm_dialect_carries_the_same_ids_and_parsed_message() -> None:
    with SGLangDouble(SCRIPT[:1], template="qwen3.5", dialect="vllm") as up:
        data = chat(up, MESSAGES).json()
    choice = data["choices"][0]
    tk = templates.tokenizer("qwen3.5")
    assert data["prompt_token_ids"] == list(up.chat_requests[0].prompt_ids or ())
    assert tk.vocab.decode(choice["token_ids"]) == QWEN3_5.sampled[0]
    assert choice["message"]["reasoning"] == "I will list it.\n"
    assert choice["message"]["content"] == "\n\n"
    calls = choice["message"]["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [("ls", ARGS)]
    assert choice["finish_reason"] == "tool_calls"


def test_server_default_kwargs_fill_only_what_the_request_left_unset() -> None:
    off = {"enable_thinking": False}
    with SGLangDouble([Reply("Hi.")] * 2, template="qwen3.5", chat_template_kwargs_default=off) as up:
        default = chat(up, MESSAGES, tools=None).json()["choices"][0]
        chosen = chat(up, MESSAGES, tools=None, chat_template_kwargs={"enable_thinking": True}).json()["choices"][0]
    texts = [r.prompt_text or "" for r in up.chat_requests]
    assert texts[0].endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert texts[1].endswith("<|im_start|>assistant\n<think>\n")
    # thinking off: the think block is in the prompt, the model writes only the answer
    assert templates.vocab("qwen3.5").decode(default["response_token_ids"]) == "Hi.<|im_end|>"
    assert (default["message"]["content"], default["message"]["reasoning_content"]) == ("Hi.", None)
    assert (chosen["message"]["content"], chosen["message"]["reasoning_content"]) == ("\n\nHi.", "\n")
