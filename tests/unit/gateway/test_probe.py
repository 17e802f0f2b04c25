"""`probe_traits`: what a server's chat template refuses or drops, read from its answers alone; against scripted
fakes, and against a fake SGLang that renders with each of the six real templates (tests/support/templates)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from polar_cli.errors import UpstreamError
from polar_cli.gateway.probe import ATTEMPTS, probe_traits
from polar_cli.templates import TemplateError
from polar_cli.templates.traits import PROBES, TemplateTraits, detect_traits
from polar_cli.translate.upstream import UpstreamOptions
from polar_cli.wire.http11 import Response
from tests.support import templates

Answer = tuple[int, dict[str, Any]]


def ok(prompt_tokens: int) -> Answer:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "O"},
        "finish_reason": "length",
        "logprobs": {"content": [{"token": "O", "logprob": -0.1}]},
        "prompt_token_ids": list(range(prompt_tokens)),
        "response_token_ids": [7],
    }
    return 200, {"choices": [choice], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1}}


def refused(message: str) -> Answer:  # SGLang's flat ErrorResponse
    return 400, {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}


class FakeUpstream:
    def __init__(self, answer: Callable[[dict[str, Any]], Answer]) -> None:
        self.answer = answer
        self.bodies: list[dict[str, Any]] = []
        self.answers: list[Response] = []

    async def post_json(self, path: str, body: bytes, *, session: str | None = None) -> Response:
        assert path == "/v1/chat/completions"
        self.bodies.append(orjson.loads(body))
        status, payload = self.answer(self.bodies[-1])
        self.answers.append(Response(status, "OK" if status == 200 else "Error", {}, orjson.dumps(payload), True))
        return self.answers[-1]

    async def get(self, path: str) -> Response:
        raise AssertionError("probe_traits only posts")

    async def close(self) -> None:
        pass


def probe(upstream: FakeUpstream, options: UpstreamOptions | None = None) -> TemplateTraits:
    return asyncio.run(probe_traits(upstream, options or UpstreamOptions(model="served")))  # type: ignore[arg-type]


def _length(messages: list[dict[str, Any]]) -> int:
    return len(orjson.dumps(messages))


def test_a_server_that_accepts_and_renders_everything_has_no_traits() -> None:
    upstream = FakeUpstream(lambda body: ok(_length(body["messages"])))
    assert probe(upstream) == TemplateTraits()
    # tiny calls built like the gateway's: the served model, one sampled token, the token fields, one rid each
    assert {b["model"] for b in upstream.bodies} == {"served"}
    assert all(b["max_tokens"] == 1 and b["return_token_ids"] is True and b["stream"] is False for b in upstream.bodies)
    assert len({b["rid"] for b in upstream.bodies}) == len(upstream.bodies)
    # a control shared by two probes is sent once
    assert len(upstream.bodies) == len({orjson.dumps(b["messages"]) for b in upstream.bodies})


def test_a_400_on_a_system_message_after_the_first_is_single_leading_system() -> None:
    def answer(body: dict[str, Any]) -> Answer:
        if any(m["role"] == "system" for m in body["messages"][1:]):
            return refused("System message must be at the beginning.")
        return ok(_length(body["messages"]))

    assert probe(FakeUpstream(answer)).held == ("single_leading_system",)


def test_a_200_whose_prompt_does_not_grow_with_a_later_system_message_is_drops_later_system() -> None:
    def answer(body: dict[str, Any]) -> Answer:
        kept = [m for i, m in enumerate(body["messages"]) if i == 0 or m["role"] != "system"]
        return ok(_length(kept))

    assert probe(FakeUpstream(answer)).held == ("drops_later_system",)


def test_a_400_about_a_user_query_is_needs_user_query() -> None:
    def answer(body: dict[str, Any]) -> Answer:
        if not any(m["role"] == "user" for m in body["messages"]):
            return refused("No user query found in messages.")
        return ok(_length(body["messages"]))

    assert probe(FakeUpstream(answer)).held == ("needs_user_query",)


def test_a_refused_control_decides_nothing_and_a_server_that_keeps_failing_leaves_traits_unknown(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr("polar_cli.gateway.probe.RETRY_DELAY", 0.0)
    assert probe(FakeUpstream(lambda body: refused("nothing renders"))) == TemplateTraits()
    down = FakeUpstream(lambda body: (503, {"message": "busy"}))
    assert probe(down) == TemplateTraits()  # the start goes on
    assert len(down.bodies) == ATTEMPTS * len(PROBES)  # each probe's control tried ATTEMPTS times, then given up
    assert "unknown" in caplog.text and "single_leading_system" in caplog.text


def test_one_bad_answer_during_the_probe_is_retried_and_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("polar_cli.gateway.probe.RETRY_DELAY", 0.0)
    calls = 0

    def answer(body: dict[str, Any]) -> Answer:
        nonlocal calls
        calls += 1
        if calls == 2:
            return 500, {"message": "internal error"}
        if any(m["role"] == "system" for m in body["messages"][1:]):
            return refused("System message must be at the beginning.")
        return ok(_length(body["messages"]))

    assert probe(FakeUpstream(answer)).held == ("single_leading_system",)


def test_the_probe_asks_with_the_gateways_template_kwargs_and_extra_fields() -> None:
    upstream = FakeUpstream(lambda body: ok(_length(body["messages"])))
    probe(upstream, UpstreamOptions(model="m", chat_template_kwargs={"enable_thinking": False}, extra_body={"x": 1}))
    assert all(b["chat_template_kwargs"] == {"enable_thinking": False} and b["x"] == 1 for b in upstream.bodies)


# --- a fake SGLang rendering with the real templates ----------------------------------------------------------------


def sglang_rendering(name: str) -> FakeUpstream:
    """An upstream that does what SGLang 0.5.23 does with a chat call: parses each assistant tool call's arguments
    (refusing text that is not a JSON object, serving_chat.parse_tool_call_arguments), renders the messages with
    the template (its raise_exception is a 400) and counts the prompt's ids in the template's vocabulary."""
    template, vocab = templates.template(name), templates.vocab(name)

    def answer(body: dict[str, Any]) -> Answer:
        for m in body["messages"]:
            for call in m.get("tool_calls") or ():
                try:
                    arguments = orjson.loads(call["function"]["arguments"])
                except orjson.JSONDecodeError:
                    return refused("Assistant tool call function.arguments must be valid JSON.")
                if not isinstance(arguments, dict):
                    return refused("Assistant tool call function.arguments must be a JSON object.")
        try:
            text = template.render(body["messages"], body.get("tools"), body.get("chat_template_kwargs"))
        except TemplateError as exc:
            return refused(str(exc))
        return ok(len(vocab.encode(text)))

    return FakeUpstream(answer)


@pytest.mark.parametrize("name", templates.NAMES)
def test_the_server_probe_finds_what_rendering_the_real_template_finds(name: str) -> None:
    """SGLang refuses non-object arguments before any template sees them, so on a server that trait always holds.
    A template that moves text (DeepSeek hoists a later system message) renders as many tokens as one that keeps it
    in place: token counts cannot show it, so the server probe leaves ``hoists_later_system`` off."""
    local = detect_traits(templates.template(name))
    expected = dataclasses.replace(local, needs_object_arguments=True, hoists_later_system=False)
    assert probe(sglang_rendering(name)) == expected


def test_the_server_probe_on_qwen3_5_and_qwen3_6() -> None:
    qwen3_5 = sglang_rendering("qwen3.5")
    assert probe(qwen3_5).held == (
        "single_leading_system", "needs_user_query", "no_developer_role", "needs_object_arguments"
    )  # fmt: skip
    refusals = {orjson.loads(r.body)["message"] for r in qwen3_5.answers if r.status == 400}
    assert {"System message must be at the beginning.", "No user query found in messages."} <= refusals
    assert probe(sglang_rendering("qwen3.6-unsloth")).held == ("drops_later_system", "needs_object_arguments")


# vLLM 0.32's answer to a call with tool_choice "auto" when it was started without a tool parser
VLLM_NO_TOOLS = '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'


def test_a_server_that_refuses_calls_with_tools_fails_the_start_naming_the_flags() -> None:
    from polar_cli.gateway.probe import probe_tools

    upstream = FakeUpstream(lambda body: refused(VLLM_NO_TOOLS) if body.get("tools") else ok(3))
    with pytest.raises(UpstreamError, match="--enable-auto-tool-choice --tool-call-parser NAME") as caught:
        asyncio.run(probe_tools(upstream, UpstreamOptions(model="served")))  # type: ignore[arg-type]
    assert VLLM_NO_TOOLS in caught.value.message
    (body,) = upstream.bodies
    assert body["tool_choice"] == "auto" and body["tools"][0]["function"]["name"] == "polar_probe"
    assert body["max_tokens"] == 1


def test_a_server_that_takes_tools_passes_and_other_failures_stay_what_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("polar_cli.gateway.probe.RETRY_DELAY", 0.0)
    from polar_cli.gateway.probe import probe_tools

    asyncio.run(probe_tools(FakeUpstream(lambda body: ok(3)), UpstreamOptions(model="served")))  # type: ignore[arg-type]
    down = FakeUpstream(lambda body: (503, {"message": "overloaded"}))
    with pytest.raises(UpstreamError, match="overloaded") as caught:
        asyncio.run(probe_tools(down, UpstreamOptions(model="served")))  # type: ignore[arg-type]
    assert "--enable-auto-tool-choice" not in caught.value.message
