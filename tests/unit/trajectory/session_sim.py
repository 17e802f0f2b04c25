"""A harness's traffic, call by call, as the capture records the gateway would write for it.

Prompts are rendered by the ChatML-like double (`tests.support.chatml_ids`: prefix-stable, so a conversation that
grows by appending extends its last prompt exactly, as a real template does) and answers are sampled as that double
samples them. What the flows show is the shape of each harness's traffic (which calls offer tools, what a compaction
re-sends, where a sub-agent's prompt comes from), not any model's wording: the summaries and tasks are made up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from polar_cli.capture import CaptureRecord
from tests.support.chatml_ids import assistant_raw_text, piece_logprob, prompt_ids, sampled_pieces

BASH = {"type": "function", "function": {"name": "bash", "description": "Run a command", "parameters": {}}}
TASK = {"type": "function", "function": {"name": "task", "description": "Start a sub-agent", "parameters": {}}}
REFUSAL = "This model's maximum context length is 4096 tokens. However, your request has 5120 input tokens."


class Sim:
    """Records of one session, appended as the harness would send its calls."""

    def __init__(self, session: str = "s1") -> None:
        self.session = session
        self.records: list[CaptureRecord] = []

    def call(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
        *,
        text: str = "",
        calls: Sequence[tuple[str, dict[str, Any]]] = (),
    ) -> dict[str, Any]:
        """One answered call; returns the assistant message the harness puts in its history."""
        seq = len(self.records)
        raw = assistant_raw_text(text, None, [(name, orjson.dumps(args).decode()) for name, args in calls])
        pieces = sampled_pieces(raw, stopped=True)
        sampled = [i for i, _ in pieces]
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = [
                {"id": f"call_{seq}_{k}", "type": "function",
                 "function": {"name": name, "arguments": orjson.dumps(args).decode()}}
                for k, (name, args) in enumerate(calls)
            ]  # fmt: skip
        finish = "tool_calls" if calls else "stop"
        self.records.append(
            self._record(
                seq,
                messages,
                tools,
                status="ok",
                response={"choices": [{"index": 0, "message": message, "finish_reason": finish}]},
                prompt=prompt_ids(messages, tools),
                sampled=sampled,
                logprobs=[piece_logprob(p, k) for k, (_, p) in enumerate(pieces)],
                finish=finish,
            )
        )
        return message

    def refuse(self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None) -> None:
        """A call the server refused: the prompt does not fit the context (SGLang's and vLLM's 400)."""
        self.records.append(
            self._record(len(self.records), messages, tools, status="upstream_error", error_kind="context_length")
        )

    def _record(
        self,
        seq: int,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None,
        *,
        status: str,
        response: dict[str, Any] | None = None,
        prompt: list[int] | None = None,
        sampled: list[int] | None = None,
        logprobs: list[float] | None = None,
        finish: str | None = None,
        error_kind: str | None = None,
    ) -> CaptureRecord:
        normalized: dict[str, Any] = {"model": "m", "messages": [dict(m) for m in messages]}
        if tools:
            normalized["tools"] = list(tools)
        return CaptureRecord(
            session_id=self.session,
            seq=seq,
            api="openai_chat",
            path="/v1/chat/completions",
            started=float(seq),
            ended=seq + 0.5,
            status=status,  # type: ignore[arg-type]
            request={"messages": normalized["messages"]},
            normalized=normalized,
            response=response,
            prompt_ids=prompt or [],
            response_ids=sampled or [],
            response_logprobs=logprobs or [],
            finish_reason=finish,
            error=REFUSAL if error_kind else None,
            error_kind=error_kind,
        )


def tool_turns(
    sim: Sim, history: list[dict[str, Any]], tools: Sequence[dict[str, Any]], n: int, *, tag: str = ""
) -> None:
    """``n`` turns of the agent loop: a bash call, its output back in the history."""
    for k in range(n):
        message = sim.call(history, tools, calls=[("bash", {"command": f"cat src/module_{tag}{k}.py"})])
        history += [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": f"x = {k}"}]


def summary_text(tag: str) -> str:
    return (
        f"## Goal ({tag})\nFix add() in calc.py so that it adds.\n## Progress\nRead calc.py and test_calc.py; the "
        "bug is on line 3, a minus where a plus belongs.\n## Next\nEdit line 3 and run the tests."
    )


SYSTEM = {"role": "system", "content": "You are a coding agent. Use bash to inspect and edit files."}
TASK_TEXT = "Fix add() in calc.py: it subtracts instead of adding.\nThe tests in test_calc.py must pass.  "
SUBAGENT_PROMPT = "Find every caller of add() in this repository and report the file paths and line numbers."


def compact(sim: Sim, history: list[dict[str, Any]], tools: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    """Pi's way: refused, a tool-less summary call of its own, the conversation restarted from the summary."""
    sim.refuse([*history, {"role": "user", "content": "go on"}], tools)
    transcript = "\n".join(str(m.get("content") or m.get("tool_calls")) for m in history)
    summary = sim.call(
        [{"role": "system", "content": "You summarise coding sessions."}, {"role": "user", "content": transcript}],
        text=summary_text(tag),
    )
    carried = f"The conversation history before this point was compacted into this summary:\n\n{summary['content']}"
    return [history[0], {"role": "user", "content": carried}]


def pi_session(compactions: int) -> Sim:
    """Three tool turns, then per compaction a refusal, a summary and two more turns, then the final answer."""
    sim = Sim()
    history = [SYSTEM, {"role": "user", "content": TASK_TEXT}]
    tool_turns(sim, history, [BASH], 3)
    for n in range(compactions):
        history = compact(sim, history, [BASH], f"pass {n}")
        tool_turns(sim, history, [BASH], 2, tag=f"c{n}")
    sim.call(history, [BASH], text="Done: add() adds.")
    return sim


def subagent_session() -> tuple[Sim, dict[str, Any]]:
    """A `task` sub-agent that compacts on its way, its answer back as the tool result; (the records, the spawning
    assistant message)."""
    sim = Sim()
    history = [SYSTEM, {"role": "user", "content": TASK_TEXT}]
    tool_turns(sim, history, [BASH, TASK], 1)
    spawn = sim.call(history, [BASH, TASK], calls=[("task", {"description": "callers", "prompt": SUBAGENT_PROMPT})])
    sub = [{"role": "system", "content": "You are a search sub-agent."}, {"role": "user", "content": SUBAGENT_PROMPT}]
    tool_turns(sim, sub, [BASH], 2, tag="sub")
    sub = compact(sim, sub, [BASH], "sub")
    tool_turns(sim, sub, [BASH], 1, tag="sub-after")
    found = sim.call(sub, [BASH], text="add() is called from calc.py:10 and cli.py:4.")
    history += [spawn, {"role": "tool", "tool_call_id": spawn["tool_calls"][0]["id"], "content": found["content"]}]
    sim.call(history, [BASH, TASK], text="Done.")
    return sim, spawn


def side_calls_and_a_retry() -> Sim:
    """A title request before the main conversation, one tool turn, the final answer, and that call again."""
    sim = Sim()
    history = [SYSTEM, {"role": "user", "content": TASK_TEXT}]
    sim.call([{"role": "system", "content": "Title this task."}, {"role": "user", "content": TASK_TEXT}], text="add")
    tool_turns(sim, history, [BASH], 1)
    sim.call(history, [BASH], text="Done.")
    sim.call(history, [BASH], text="Done, for sure.")  # the same prompt again: a retry
    return sim
