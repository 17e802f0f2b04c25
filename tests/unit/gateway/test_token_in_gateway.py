"""Token-in mode and reasoning re-injection through the gateway handler, on real templates and vocabularies.

The upstream is the in-process scripted engine (it renders the real template and honours ``input_ids`` as SGLang
does); the harness side is a Claude-Code-shaped Anthropic client that sends each answer back without its thinking,
as Claude Code does when its model's thinking blocks carry no signature. What this cannot show: SGLang's own parsers
(tests/unit/support covers the double that runs them).
"""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import orjson
import pytest

from polar_cli.capture import CaptureRecord, CaptureWriter, read_session
from polar_cli.capture.store import session_file
from polar_cli.gateway.continuation import TokenIn
from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.inference.gold import ScriptedTurn, Task
from polar_cli.inference.scripted import ScriptedUpstream
from polar_cli.templates import detect_traits
from polar_cli.translate.upstream import UpstreamOptions
from polar_cli.wire.http11 import Request
from tests.support import templates

TOOL = {
    "name": "Bash",
    "description": "Run a command",
    "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
}


class LoopPolicy:
    """Three tool turns, then a final answer; with reasoning text when thinking is on."""

    name = "loop"

    def next_turn(self, body: Any, task: Task | None) -> ScriptedTurn:
        results = sum(1 for m in body["messages"] if m.get("role") == "tool")
        thinking = (body.get("chat_template_kwargs") or {}).get("enable_thinking")
        reasoning = f"Step {results}: look around." if thinking else None
        if results >= 3:
            return ScriptedTurn("All done.", reasoning=reasoning)
        return ScriptedTurn("", (("Bash", {"command": f"ls dir{results}"}),), reasoning)


def _post(gateway: Gateway, body: dict[str, Any]) -> dict[str, Any]:
    raw = orjson.dumps(body)
    reply = asyncio.run(
        gateway.handle(Request("POST", "/v1/messages", "/v1/messages", "", {"x-api-key": "k"}, raw, True))
    )
    assert reply.status == 200, reply.body
    out: dict[str, Any] = orjson.loads(reply.body)
    return out


def _session(tmp_path: Path, name: str, thinking: bool, *, token_in: bool) -> list[CaptureRecord]:
    tk = templates.tokenizer(name)
    sessions = SessionRegistry()
    sessions.open("s", "k")
    writer = CaptureWriter(tmp_path)
    engine = ScriptedUpstream(LoopPolicy(), tk, "m")
    gateway = Gateway(
        upstream=engine,
        options=UpstreamOptions(model="m", chat_template_kwargs={"enable_thinking": thinking}),
        sessions=sessions,
        capture=writer,
        token_in=TokenIn(tk.template, tk.vocab, tk.turn_ends) if token_in else None,
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the bug."}]
    for _ in range(5):
        body = {
            "model": "claude",
            "max_tokens": 100,
            "system": "You are a coding agent.",
            "tools": [TOOL],
            "messages": messages,
        }
        answer = _post(gateway, body)
        blocks = [b for b in answer["content"] if b["type"] != "thinking"]  # the harness drops unsigned thinking
        messages = [*messages, {"role": "assistant", "content": blocks}]
        calls = [b for b in blocks if b["type"] == "tool_use"]
        if not calls:
            break
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": c["id"], "content": "ok"} for c in calls],
            }
        )
    writer.close()
    return read_session(session_file(tmp_path, "s"))


@pytest.mark.parametrize("name", ["qwen3", "qwen3.5"])
@pytest.mark.parametrize("thinking", [False, True])
def test_token_in_prompts_are_the_previous_prompt_plus_sampled_ids(tmp_path: Path, name: str, thinking: bool) -> None:
    records = _session(tmp_path, name, thinking, token_in=True)
    assert len(records) == 4
    assert [r.prompt_mode for r in records] == ["rendered", "token_in", "token_in", "token_in"]
    assert records[0].prompt_note == "first call of the session"
    for prev, nxt in itertools.pairwise(records):
        joined = [*prev.prompt_ids, *prev.response_ids]
        assert nxt.prompt_ids[: len(joined)] == joined
        assert "input_ids" not in nxt.normalized  # the capture keeps the body without the ids
    if thinking:  # the sampled reasoning is in the trainable ids
        assert "Step 0: look around." in templates.tokenizer(name).vocab.decode(records[0].response_ids)


@pytest.mark.parametrize("name", ["qwen3.5"])
def test_reinjected_reasoning_chains_plain_rendering_with_thinking_on(tmp_path: Path, name: str) -> None:
    """Qwen3.5 keeps reasoning in the tool loop: with it given back, rendered prompts extend the last exactly."""
    records = _session(tmp_path, name, True, token_in=False)
    assert all(m.get("reasoning_content") for m in records[-1].normalized["messages"] if m["role"] == "assistant")
    for prev, nxt in itertools.pairwise(records):
        joined = [*prev.prompt_ids, *prev.response_ids]
        assert nxt.prompt_ids[: len(joined)] == joined


def test_rendered_qwen3_without_thinking_drifts_where_token_in_does_not(tmp_path: Path) -> None:
    """Qwen3's empty think block of the generation prompt is left out when the history is re-rendered."""
    records = _session(tmp_path / "plain", "qwen3", False, token_in=False)
    assert [r.prompt_mode for r in records] == [None] * 4
    chained = [
        nxt.prompt_ids[: len(p.prompt_ids) + len(p.response_ids)] == [*p.prompt_ids, *p.response_ids]
        for p, nxt in itertools.pairwise(records)
    ]
    assert chained == [False, False, False]


def test_a_history_the_template_refuses_is_reshaped_and_the_rules_are_recorded(tmp_path: Path) -> None:
    """Claude Code's system turn after the user turn: Qwen3.5 refuses it as sent."""
    tk = templates.tokenizer("qwen3.5")
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Fix the bug."},
            {"role": "system", "content": "# Environment: /testbed"},
        ],
    }
    statuses = []
    for name, traits in (("as-sent", None), ("safe", detect_traits(tk.template))):
        sessions = SessionRegistry()
        sessions.open("s", "k")
        writer = CaptureWriter(tmp_path / name)
        gateway = Gateway(
            upstream=ScriptedUpstream(LoopPolicy(), tk, "m"),
            options=UpstreamOptions(model="m"),
            sessions=sessions,
            capture=writer,
            traits=traits,
        )
        path = "/v1/chat/completions"
        reply = asyncio.run(
            gateway.handle(Request("POST", path, path, "", {"authorization": "Bearer k"}, orjson.dumps(body), True))
        )
        statuses.append(reply.status)
        writer.close()
        (record,) = read_session(session_file(tmp_path / name, "s"))
        if traits is None:
            assert "System message must be at the beginning" in (record.error or "")
        else:
            assert record.template_rules == ("later_system_as_user",) and record.status == "ok"
            sent = [m["role"] for m in record.normalized["messages"]]
            assert sent == ["system", "user", "user"] and "# Environment: /testbed" in tk.vocab.decode(
                record.prompt_ids
            )
    assert statuses[0] >= 500 and statuses[1] == 200
