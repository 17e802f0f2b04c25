"""Shared pieces of the judge's unit tests: a rubric, capture records of a small session, a scripted transport."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from polar_cli.capture import CaptureRecord
from polar_cli.judge.rubric import Rubric, parse_rubric

RUBRIC_YAML = b"""
name: demo
criteria:
  - name: correctness
    description: The change fixes the issue the task describes.
    weight: 3
  - name: process
    description: The agent inspected the code before editing and verified its change.
"""


def rubric() -> Rubric:
    return parse_rubric(RUBRIC_YAML)


def record(seq: int, messages: list[dict[str, Any]], answer: dict[str, Any]) -> CaptureRecord:
    return CaptureRecord(
        session_id="s",
        seq=seq,
        api="openai_chat",
        path="/v1/chat/completions",
        started=0.0,
        ended=1.0,
        status="ok",
        request={},
        normalized={"messages": messages, "tools": [{"type": "function", "function": {"name": "bash"}}]},
        response={"choices": [{"message": answer}]},
        prompt_ids=list(range(1, 4 + 3 * seq)),
        response_ids=[100 + seq, 2],
        response_logprobs=[-0.1, -0.2],
        finish_reason="stop",
    )


SYSTEM = {"role": "system", "content": "You are Pi, a coding agent. " * 50}
TASK = {"role": "user", "content": "Fix the off-by-one error in count()."}
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command":"ls"}'}}],
}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "x" * 5000}
DONE = {"role": "assistant", "content": "Fixed it: count() now starts at 0."}


def session() -> list[CaptureRecord]:
    """Two calls of one conversation: a tool call, then the final answer after its (long) output."""
    return [record(0, [SYSTEM, TASK], CALL), record(1, [SYSTEM, TASK, CALL, RESULT], DONE)]


def answer(text: str) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}


GOOD = '{"scores": {"correctness": {"score": 8, "reason": "fixed"}, "process": {"score": 4, "reason": "no test"}}}'


@dataclasses.dataclass
class ScriptedTransport:
    """Answers each call from a list (a dict: the answer; an Exception: raised), recording every body."""

    script: list[Any]
    bodies: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    closed: bool = False
    hook: Callable[[dict[str, Any]], None] | None = None

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        self.bodies.append(body)
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item  # type: ignore[no-any-return]

    async def close(self) -> None:
        self.closed = True
