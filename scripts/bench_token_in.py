"""Benchmark what token-in mode costs the gateway per call, against rendering the call's whole conversation.

Per turn, at about 8k, 32k and 80k prompt ids, on the same conversations in the same process:

- `token_in_prompt`, what the gateway runs: compare the history with the previous call's, render the new messages
  (from a small window of the history where `gateway.tail`'s checks vouch for it) and tokenise them;
- the baseline `full`: the same with the tail cut from the whole conversation rendered twice (with and without the
  new messages), which is what every call paid before the window, and what a call the window cannot vouch for pays;
- `render`: the chat template over the whole history, then tokenising it (`ChatTokenizer.prompt_ids`), the work a
  server does for every rendered call anyway.

The conversation is a synthetic tool loop (a system prompt, a user task, then rounds of an assistant tool call with a
short reasoning and a tool result of about 300 tokens), sent as a harness sends it: parsed afresh from JSON, without
the reasoning. Each figure is the best of ``--repeat`` runs; ``--json`` prints the worst template's token-in figure per
size as ``per_turn_ms`` and the baselines beside it. A CPU microbenchmark: compare its ratios, not its milliseconds.

    python scripts/bench_token_in.py [--ids 8000,32000,80000] [--templates qwen3,qwen3.5,...] [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from polar_cli.gateway.continuation import (
    Continuation,
    SampledTurn,
    TokenIn,
    answer_message,
    call_context,
    find_continuation,
    token_in_prompt,
)
from polar_cli.gateway.tail import TailRender, full_tail, window_tail
from polar_cli.inference.tokenizers import ChatTokenizer
from polar_cli.translate.dialects import SGLANG
from tests.support import templates

TEMPLATES = "qwen3,qwen3.5,qwen3.6-unsloth,gpt-oss,gemma-4,glm-4.6"
KWARGS = {"enable_thinking": True}
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


def turns_for(tk: ChatTokenizer, ids: int) -> int:
    """How many rounds make a prompt of about ``ids`` ids (measured at 4 and 8 rounds, then extrapolated)."""
    small, large = (len(tk.prompt_ids(conversation(n)[0], TOOLS, KWARGS)) for n in (4, 8))
    per_round = (large - small) / 4
    return max(1, round(4 + (ids - small) / per_round))


def full_path(turns: list[SampledTurn], body: dict[str, Any], token_in: TokenIn) -> list[int]:
    """The baseline: `token_in_prompt` with the tail cut from the whole conversation rendered twice."""
    found = find_continuation(turns, body, token_in.turn_end_ids)
    assert isinstance(found, Continuation), found
    render = TailRender(token_in.template, body.get("tools"), body.get("chat_template_kwargs"), token_in.turn_ends)
    tail = full_tail(render, [*found.turn.messages, found.answer], found.new)
    assert tail is not None
    return [*found.turn.prompt_ids, *found.turn.sampled_ids, *token_in.vocab.encode(tail)]


def best_ms(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times) * 1e3


def measure(name: str, ids: int, repeat: int) -> dict[str, Any]:
    tk = templates.tokenizer(name)
    history, answer = conversation(turns_for(tk, ids))
    prompt = tk.prompt_ids(history, TOOLS, KWARGS)
    sampled = tk.sampled_ids(history, TOOLS, answer, KWARGS)
    body = {"messages": history, "tools": TOOLS, "chat_template_kwargs": KWARGS}
    turn = SampledTurn(tuple(history), call_context(body), answer, array("i", prompt), sampled)
    sent_back = {k: v for k, v in answer.items() if k != "reasoning_content"}
    result = {"role": "tool", "tool_call_id": "last", "content": RESULT}
    # as the gateway gets it: a fresh parse of the harness's JSON, no object shared with the stored turn
    nxt = orjson.loads(orjson.dumps({**body, "messages": [*history, sent_back, result]}))
    token_in = TokenIn(tk.template, tk.vocab, tk.turn_ends)
    fast = token_in_prompt([turn], nxt, token_in, SGLANG)
    assert isinstance(fast, list), fast
    assert fast == full_path([turn], nxt, token_in), f"{name}: the window's ids differ from the full rendering's"
    render = TailRender(tk.template, TOOLS, KWARGS, tk.turn_ends)
    windowed = window_tail(render, [*history, nxt["messages"][len(history)]], [result]) is not None
    return {
        "template": name,
        "ids": ids,
        "prompt_ids": len(fast),
        "windowed": windowed,
        "token_in_ms": best_ms(lambda: token_in_prompt([turn], nxt, token_in, SGLANG), repeat),
        "full_ms": best_ms(lambda: full_path([turn], nxt, token_in), repeat),
        "render_ms": best_ms(lambda: tk.prompt_ids(nxt["messages"], TOOLS, KWARGS), repeat),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ids", default="8000,32000,80000")
    ap.add_argument("--templates", default=TEMPLATES)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = ap.parse_args()
    sizes = [int(n) for n in args.ids.split(",")]
    rows = [measure(name, ids, args.repeat) for ids in sizes for name in args.templates.split(",")]
    if args.json:
        worst = {str(ids): max((r for r in rows if r["ids"] == ids), key=lambda r: r["token_in_ms"]) for ids in sizes}
        print(
            json.dumps(
                {
                    "per_turn_ms": {k: round(r["token_in_ms"], 3) for k, r in worst.items()},
                    "worst_template": {k: r["template"] for k, r in worst.items()},
                    "baseline_full_ms": {k: round(r["full_ms"], 3) for k, r in worst.items()},
                    "baseline_render_ms": {k: round(r["render_ms"], 3) for k, r in worst.items()},
                    "rows": rows,
                }
            )
        )
        return
    print(
        f"{'template':<16} {'ids':>7} {'render+encode ms':>17} {'full ms':>8} {'token-in ms':>12} {'vs full':>8} window"
    )
    for r in rows:
        print(
            f"{r['template']:<16} {r['prompt_ids']:>7} {r['render_ms']:>17.2f} {r['full_ms']:>8.2f} "
            f"{r['token_in_ms']:>12.2f} {r['token_in_ms'] / r['full_ms']:>8.3f} {'yes' if r['windowed'] else 'no'}"
        )


if __name__ == "__main__":
    main()
