"""Benchmark what token-in mode costs the gateway per call, against rendering the call's whole prompt.

The baseline is the work a server does for every rendered call anyway: the chat template over the whole history, then
tokenising it (`ChatTokenizer.prompt_ids`). Token-in replaces that on the server with ids; the gateway then pays
`continuation.token_in_prompt`: comparing the history with the previous call's, rendering the history twice (with and
without the new messages) and tokenising only the new tail. Both run in the same process on the same conversations:
a synthetic tool loop (a system prompt, a user task, then N rounds of an assistant tool call with a short reasoning
and a tool result of about 300 tokens), on the real Qwen3 and Qwen3.5 templates and vocabularies.

    python scripts/bench_token_in.py [--turns 10,50,100] [--templates qwen3,qwen3.5] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from array import array
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polar_cli.gateway.continuation import SampledTurn, TokenIn, answer_message, call_context, token_in_prompt
from polar_cli.translate.dialects import SGLANG
from tests.support import templates

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command in the repository and return its output.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
RESULT = "\n".join(f"src/module_{i}.py:{i * 7}: def function_{i}(value): return value * {i}" for i in range(20))


def conversation(turns: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The history before the last round, and the last answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. " * 40},
        {"role": "user", "content": "Fix the failing test in the repository."},
    ]
    for i in range(turns):
        call = {
            "id": f"c{i}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"grep -n x{i} -r ."})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": RESULT})
    last = answer_message(
        "",
        "Look at the next file.",
        [{"id": "last", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}],
    )
    return messages, last


def measure(name: str, turns: int, repeat: int) -> tuple[float, float, int]:
    tk = templates.tokenizer(name)
    kwargs = {"enable_thinking": True}
    history, answer = conversation(turns)
    prompt = tk.prompt_ids(history, TOOLS, kwargs)
    sampled = tk.sampled_ids(history, TOOLS, answer, kwargs)
    body = {"messages": history, "tools": TOOLS, "chat_template_kwargs": kwargs}
    turn = SampledTurn(tuple(history), call_context(body), answer, array("i", prompt), sampled)
    sent_back = {k: v for k, v in answer.items() if k != "reasoning_content"}
    nxt = {**body, "messages": [*history, sent_back, {"role": "tool", "tool_call_id": "last", "content": RESULT}]}
    token_in = TokenIn(tk.template, tk.vocab, tk.turn_ends)

    def best(fn: Any) -> float:
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return min(times)

    ids = token_in_prompt([turn], nxt, token_in, SGLANG)
    assert isinstance(ids, list), ids
    rendered = best(lambda: tk.prompt_ids(nxt["messages"], TOOLS, kwargs))
    planned = best(lambda: token_in_prompt([turn], nxt, token_in, SGLANG))
    return rendered, planned, len(ids)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", default="10,50,100")
    ap.add_argument("--templates", default="qwen3,qwen3.5")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{'template':<10} {'turns':>5} {'prompt ids':>10} {'render+encode ms':>17} {'token-in ms':>12} {'ratio':>6}")
    for name in args.templates.split(","):
        for turns in (int(t) for t in args.turns.split(",")):
            rendered, planned, n = measure(name, turns, args.repeat)
            ratio = planned / rendered
            print(f"{name:<10} {turns:>5} {n:>10} {rendered * 1e3:>17.1f} {planned * 1e3:>12.1f} {ratio:>6.2f}")


if __name__ == "__main__":
    main()
