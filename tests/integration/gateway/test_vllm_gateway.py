"""The gateway in front of a REAL vLLM on CPU: captured token ids are exactly the server's, call after call.

SmolLM2-135M-Instruct (a real model, real chat template) for multi-turn text through two SDKs; a tiny random-weight
Qwen3 with the real Qwen3 tokenizer and official template for tool turns, whose capture is then merged with
prefix_merging and reported (which calls merged, and why the others split).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from polar_cli.capture import CaptureRecord, read_session
from polar_cli.capture.store import session_file
from polar_cli.gateway.continuation import TokenIn
from polar_cli.inference.tokenizers import ChatTokenizer
from polar_cli.trajectory.per_request import per_request
from polar_cli.trajectory.prefix_merging import prefix_merging
from polar_cli.trajectory.report import explain
from tests.support.gateway import RunningGateway, running_gateway
from tests.support.models import QWEN3_TINY_DIR
from tests.support.vllm_server import VLLMServer

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)


@pytest.fixture
def smollm2_gateway(smollm2: VLLMServer, tmp_path: Path) -> Iterator[RunningGateway]:
    with running_gateway(smollm2.url, tmp_path, dialect_name="vllm", model="smollm2", upstream_timeout=300) as gw:
        yield gw


def records_of(gw: RunningGateway, session_id: str) -> list[CaptureRecord]:
    gw.flush()
    return read_session(session_file(gw.capture_dir, session_id))


def server_tokenize(server: VLLMServer, normalized: dict[str, Any]) -> list[int]:
    body = {"model": server.served_model_name, "messages": normalized["messages"], "add_generation_prompt": True}
    if normalized.get("tools"):
        body["tools"] = normalized["tools"]
    if normalized.get("chat_template_kwargs"):
        body["chat_template_kwargs"] = normalized["chat_template_kwargs"]
    resp = httpx.post(server.url + "/tokenize", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    tokens: list[int] = resp.json()["tokens"]
    return tokens


def check_exact(server: VLLMServer, records: list[CaptureRecord]) -> None:
    for r in records:
        assert r.status == "ok", r.error
        assert r.normalized is not None and r.response is not None
        assert r.prompt_ids == server_tokenize(server, r.normalized), f"call {r.seq}"
        assert len(r.response_ids) == r.response["usage"]["completion_tokens"] == len(r.response_logprobs)
        assert all(lp <= 0.0 for lp in r.response_logprobs)


def test_multi_turn_text_through_two_sdks_captures_the_servers_own_ids(
    smollm2: VLLMServer, smollm2_gateway: RunningGateway
) -> None:
    gw = smollm2_gateway
    ant = anthropic.Anthropic(base_url=gw.url, api_key=gw.open_session("smol-anthropic"), max_retries=0)
    history: list[anthropic.types.MessageParam] = []
    for question in ["Name a colour.", "And a fruit?", "Which of the two is sweeter?"]:
        history.append({"role": "user", "content": question})
        with ant.messages.stream(
            model="smollm2", max_tokens=24, system="You answer briefly.", messages=history
        ) as stream:
            reply = stream.get_final_message()
        text = "".join(b.text for b in reply.content if b.type == "text")
        assert reply.usage.output_tokens > 0
        history.append({"role": "assistant", "content": text})
    oai = openai.OpenAI(base_url=gw.url + "/v1", api_key=gw.open_session("smol-chat"), max_retries=0)
    messages: list[dict[str, str]] = [{"role": "system", "content": "You answer briefly."}]
    for question in ["What is 2+2?", "And 3+3?"]:
        messages.append({"role": "user", "content": question})
        completion = oai.chat.completions.create(model="smollm2", messages=messages, max_tokens=24, temperature=0)  # type: ignore[arg-type]
        messages.append({"role": "assistant", "content": completion.choices[0].message.content or ""})
    anthropic_records = records_of(gw, "smol-anthropic")
    chat_records = records_of(gw, "smol-chat")
    assert len(anthropic_records) == 3 and len(chat_records) == 2
    check_exact(smollm2, anthropic_records)
    check_exact(smollm2, chat_records)
    # each call's prompt extends the previous one: the history the harness re-sent renders to the same ids
    for records in (anthropic_records, chat_records):
        for prev, nxt in itertools.pairwise(records):
            assert nxt.prompt_ids[: len(prev.prompt_ids)] == prev.prompt_ids


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


# A random-weight model makes tool calls only when made to: the gateway adds (as a deployment could) a structured-output
# regex to every call, so each answer is a well-formed call of the harness's tool, ended by <|im_end|> (the other EOS,
# <|endoftext|>, is banned the way a real Qwen3 chat turn never ends on it). Thinking is off so the regex applies from
# the first sampled token.
FORCE_TOOL_CALL = {
    "structured_outputs": {
        "regex": r'<tool_call>\n\{"name": "get_weather", "arguments": \{"city": "(Paris|Rome|Oslo)"\}\}\n</tool_call>'
    },
    "logit_bias": {"151643": -100},
}
NO_THINKING = {"chat_template_kwargs": {"enable_thinking": False}}


def weather_session(server: VLLMServer, tmp_path: Path, **gateway: Any) -> list[CaptureRecord]:
    """Three forced tool turns of a weather bot through the gateway, as the OpenAI SDK sends them."""
    with running_gateway(
        server.url,
        tmp_path,
        dialect_name="vllm",
        model="qwen3-tiny",
        upstream_timeout=300,
        extra_body=FORCE_TOOL_CALL,
        **gateway,
    ) as gw:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key=gw.open_session("qwen-tools"), max_retries=0)
        messages: list[Any] = [
            {"role": "system", "content": "You are a weather bot."},
            {"role": "user", "content": "Weather in Paris, Rome and Oslo?"},
        ]
        for turn in range(3):
            completion = client.chat.completions.create(
                model="qwen3-tiny",
                messages=messages,
                tools=[WEATHER],
                max_tokens=60,
                temperature=0,
                extra_body=NO_THINKING,
            )
            message = completion.choices[0].message
            assert message.tool_calls, f"turn {turn}: no tool call in {message}"
            call = message.tool_calls[0]
            messages.append(
                {"role": "assistant", "content": message.content, "tool_calls": [call.model_dump(exclude_none=True)]}
            )
            messages.append({"role": "tool", "tool_call_id": call.id, "content": f"result {turn}: 18C, cloudy"})
        return records_of(gw, "qwen-tools")


def test_tool_session_on_the_real_qwen3_template_merges_and_reports(qwen3_tiny: VLLMServer, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    records = weather_session(qwen3_tiny, tmp_path)
    assert len(records) == 3
    check_exact(qwen3_tiny, records)
    by_request = per_request(records)
    merged = prefix_merging(records)
    sampled = [i for r in records for i in r.response_ids]
    for build in (by_request, merged):
        trainable = [i for t in build.traces for i, m in zip(t.response_ids, t.loss_mask, strict=True) if m]
        assert trainable == sampled  # every sampled id trainable exactly once, in order, nothing else
    tokenizer = AutoTokenizer.from_pretrained(str(QWEN3_TINY_DIR))
    report = explain(merged, records, decode=tokenizer.decode)
    log.warning("prefix_merging on the real Qwen3 template:\n%s", report)
    print(report)
    # What Qwen3's official template does with thinking off: the generation prompt ends with an empty
    # "<think>\n\n</think>\n\n", but the re-rendered history leaves that block out of earlier assistant turns, so
    # every tool turn breaks the prefix. prefix_merging must see that as a prefix break right at the think block (not
    # merge a prompt that is not an extension), and keep every sampled id trainable in its own trace.
    assert [s.kind for s in merged.stats.splits] == ["prefix_break", "prefix_break"], report
    for split, record in zip(merged.stats.splits, records, strict=False):
        assert split.at == len(record.prompt_ids) - 4  # <think> \n\n </think> \n\n: the last four prompt ids


def test_token_in_on_vllm_merges_the_tool_session_into_one_trace(qwen3_tiny: VLLMServer, tmp_path: Path) -> None:
    """The same session in token-in mode: each continuation goes as the previous prompt + sampled ids + only the new
    messages rendered (vLLM's kv_transfer_params.prompt_token_ids), so the think block Qwen3 drops stays: one trace."""
    tk = ChatTokenizer.load(str(QWEN3_TINY_DIR))
    records = weather_session(qwen3_tiny, tmp_path, token_in=TokenIn(tk.template, tk.vocab, tk.turn_ends))
    assert [r.prompt_mode for r in records] == ["rendered", "token_in", "token_in"], [r.prompt_note for r in records]
    for prev, nxt in itertools.pairwise(records):
        assert list(nxt.prompt_ids[: len(prev.prompt_ids) + len(prev.response_ids)]) == [
            *prev.prompt_ids,
            *prev.response_ids,
        ]
    merged = prefix_merging(records)
    assert len(merged.traces) == 1 and merged.stats.splits == () and merged.stats.drift_tokens == 0
    trainable = [i for t in merged.traces for i, m in zip(t.response_ids, t.loss_mask, strict=True) if m]
    assert trainable == [i for r in records for i in r.response_ids]
