"""Token-in continuation on the real chat templates: what is a continuation, and the exact prompt it gets."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest

from polar_cli.gateway.continuation import (
    Continuation,
    SampledTurn,
    answer_message,
    call_context,
    continuation_prompt,
    find_continuation,
    first_difference,
    suffix_text,
)
from polar_cli.gateway.reasoning import ReasoningMemory, turn_key
from tests.support import templates

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
START = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the bug."}]


def _call(i: int, command: str) -> dict[str, Any]:
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": command})},
    }


def _body(messages: list[dict[str, Any]], kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"messages": messages, "tools": TOOLS}
    if kwargs is not None:
        body["chat_template_kwargs"] = kwargs
    return body


def _session(name: str, kwargs: dict[str, Any], reasoning: str | None, turns: int = 3) -> list[dict[str, Any]]:
    """A tool loop as the model samples it and the harness sends it back (without reasoning: most APIs drop it)."""
    tk = templates.tokenizer(name)
    messages = list(START)
    out = []
    for i in range(turns):
        body = _body(list(messages), kwargs)
        prompt = tk.prompt_ids(messages, TOOLS, kwargs)
        answer = answer_message("", reasoning, [_call(i, f"ls dir{i}")])
        sampled = tk.sampled_ids(messages, TOOLS, answer, kwargs)
        out.append({"body": body, "prompt": prompt, "sampled": sampled, "answer": answer})
        sent_back = {k: v for k, v in answer.items() if k != "reasoning_content"}
        messages += [sent_back, {"role": "tool", "tool_call_id": f"call_{i}", "content": f"file{i}.py"}]
    return out


def _turn(call: dict[str, Any]) -> SampledTurn:
    body = call["body"]
    return SampledTurn(tuple(body["messages"]), call_context(body), call["answer"], call["prompt"], call["sampled"])


@pytest.mark.parametrize("name", ["qwen3", "qwen3.5", "nemotron-3-super", "gpt-oss"])
@pytest.mark.parametrize("thinking", [False, True])
def test_every_continuation_prompt_extends_what_the_model_saw_and_sampled(name: str, thinking: bool) -> None:
    tk = templates.tokenizer(name)
    kwargs = {"enable_thinking": thinking}
    calls = _session(name, kwargs, "I should list the files." if thinking else None)
    ends = frozenset(i for t in tk.turn_ends if (i := tk.vocab.token_id(t)) is not None)
    for prev, nxt in itertools.pairwise(calls):
        found = find_continuation([_turn(prev)], nxt["body"], ends)
        assert isinstance(found, Continuation), found
        assert [m["role"] for m in found.new] == ["tool"]
        ids = continuation_prompt(found, tk.template, tk.vocab, nxt["body"], tk.turn_ends)
        assert ids is not None
        joined = prev["prompt"] + prev["sampled"]
        assert ids[: len(joined)] == joined
        # the rest is the template's own rendering of the tool result and the generation prompt
        rest = tk.vocab.decode(ids[len(joined) :])
        assert "file" in rest and tk.render(nxt["body"]["messages"], TOOLS, kwargs, generation_prompt=True).endswith(
            rest
        )


def test_qwen3_5_thinking_breaks_rendered_prompts_by_one_id_and_token_in_does_not() -> None:
    """As measured in the issue: the prompt's last id (\\n, 198) becomes \\n\\n (271) when a think block follows."""
    tk = templates.tokenizer("qwen3.5")
    kwargs = {"enable_thinking": True}
    first, second = _session("qwen3.5", kwargs, None, turns=2)
    n = len(first["prompt"])
    assert second["prompt"][: n - 1] == first["prompt"][: n - 1]
    assert (first["prompt"][n - 1], second["prompt"][n - 1]) == (198, 271)
    found = find_continuation([_turn(first)], second["body"], frozenset({tk.eot_id}))
    assert isinstance(found, Continuation)
    ids = continuation_prompt(found, tk.template, tk.vocab, second["body"], tk.turn_ends)
    assert ids is not None and ids[: n + len(first["sampled"])] == first["prompt"] + first["sampled"]


def test_qwen3_5_with_reasoning_reinjected_renders_exactly_the_token_in_prompt() -> None:
    """Qwen3.5 keeps reasoning inside the tool loop: with the sampled reasoning put back, plain rendering chains."""
    tk = templates.tokenizer("qwen3.5")
    kwargs = {"enable_thinking": True}
    first, second = _session("qwen3.5", kwargs, "Look at the files first.", turns=2)
    memory = ReasoningMemory()
    memory.remember(first["answer"])
    messages, restored = memory.reinject(second["body"]["messages"])
    assert restored == 1 and second["body"]["messages"][2].get("reasoning_content") is None  # input left alone
    rendered = tk.prompt_ids(messages, TOOLS, kwargs)
    joined = first["prompt"] + first["sampled"]
    assert rendered[: len(joined)] == joined


def test_what_does_not_continue_is_rendered_with_the_reason() -> None:
    first, second = _session("qwen3", {}, None, turns=2)
    turn = _turn(first)
    ends = frozenset({151645})
    body = second["body"]
    edited = {**body, "messages": [{**body["messages"][0], "content": "compacted"}, *body["messages"][1:]]}
    assert find_continuation([turn], edited, ends) == "history differs at message 0"
    other_answer = [
        *body["messages"][:2],
        {**body["messages"][2], "tool_calls": [_call(0, "rm -rf x")]},
        *body["messages"][3:],
    ]
    assert find_continuation([turn], {**body, "messages": other_answer}, ends) == "message 2 is not the previous answer"
    assert find_continuation([turn], {**body, "tools": []}, ends) == "tools or template settings changed"
    assert find_continuation([turn], first["body"], ends) == "history is shorter"
    assert find_continuation([], body, ends) == "first call of the session"
    cut = SampledTurn(turn.messages, turn.context, turn.answer, turn.prompt_ids, turn.sampled_ids[:-1])
    assert "did not end its turn" in str(find_continuation([cut], body, ends))
    # the arguments compare as JSON, not as bytes: a harness that re-serialises them still continues
    spaced = json.dumps(json.loads(first["answer"]["tool_calls"][0]["function"]["arguments"]), indent=2)
    respaced = [
        *body["messages"][:2],
        {**body["messages"][2], "tool_calls": [{**_call(0, ""), "function": {"name": "bash", "arguments": spaced}}]},
        *body["messages"][3:],
    ]
    assert isinstance(find_continuation([turn], {**body, "messages": respaced}, ends), Continuation)


def test_the_suffix_starts_after_the_answers_turn_end() -> None:
    tk = templates.tokenizer("qwen3")
    history = [*START, answer_message("Done.", None, [])]
    suffix = suffix_text(tk.template, history, [{"role": "user", "content": "thanks"}], None, {}, tk.turn_ends)
    assert suffix == "\n<|im_start|>user\nthanks<|im_end|>\n<|im_start|>assistant\n"


def test_turn_keys_prefer_call_ids_and_ignore_empty_turns() -> None:
    assert turn_key({"role": "assistant", "tool_calls": [_call(1, "x"), _call(2, "y")]}) == "calls:call_1,call_2"
    assert turn_key({"role": "assistant", "content": " hi "}) == turn_key({"role": "assistant", "content": "hi"})
    assert turn_key({"role": "assistant", "content": ""}) is None
    memory = ReasoningMemory(limit=1)
    memory.remember({"role": "assistant", "content": "a", "reasoning_content": "ra"})
    memory.remember({"role": "assistant", "content": "b", "reasoning_content": "rb"})
    sent = [{"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b", "reasoning_content": "own"}]
    messages, restored = memory.reinject(sent)
    assert restored == 0 and messages[1]["reasoning_content"] == "own" and len(memory) == 1
    messages, restored = memory.reinject([{"role": "assistant", "content": "b"}])
    assert restored == 1 and messages[0]["reasoning_content"] == "rb"


def test_calls_sent_back_without_the_gateways_ids_get_their_reasoning_by_content() -> None:
    """Pi on the Gemini API sends a functionCall with no id; the decoder numbers it by position."""
    memory = ReasoningMemory()
    memory.remember(answer_message("", "why ls", [_call(7, "ls")]))
    renumbered = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{**_call(0, ""), **{"function": {"name": "bash", "arguments": '{"command":"ls"}'}}}],
    }
    messages, restored = memory.reinject([renumbered])
    assert restored == 1 and messages[0]["reasoning_content"] == "why ls"
    other = {**renumbered, "tool_calls": [_call(0, "pwd")]}
    assert memory.reinject([other])[1] == 0


def test_gemma_matches_tool_results_by_the_harness_ids_so_the_suffix_renders_with_the_harness_copy() -> None:
    tk = templates.tokenizer("gemma-4")
    first, second = _session("gemma-4", {}, None, turns=2)
    body = second["body"]
    # the harness renumbered the call (and its result): the remembered answer has the gateway's id
    renumbered = json.loads(json.dumps(body).replace('"call_0"', '"call_9"'))
    found = find_continuation(
        [_turn(first)], renumbered, frozenset(i for t in tk.turn_ends if (i := tk.vocab.token_id(t)))
    )
    assert isinstance(found, Continuation) and found.answer["tool_calls"][0]["id"] == "call_9"
    ids = continuation_prompt(found, tk.template, tk.vocab, renumbered, tk.turn_ends)
    assert ids is not None and "file0.py" in tk.vocab.decode(ids[len(first["prompt"]) + len(first["sampled"]) :])


def test_first_difference_compares_equal_copies_at_once_and_otherwise_as_the_template_sees_them() -> None:
    history = [
        *START,
        answer_message("", None, [_call(0, "ls")]),
        {"role": "tool", "tool_call_id": "call_0", "content": "a"},
    ]
    copied = json.loads(json.dumps(history))
    assert first_difference([*copied, {"role": "user", "content": "more"}], history) is None
    respaced = [
        *copied[:2],
        {
            **copied[2],
            "tool_calls": [{**_call(0, ""), "function": {"name": "bash", "arguments": '{"command":  "ls"}'}}],
        },
        copied[3],
    ]
    assert first_difference(respaced, history) is None
    assert first_difference([*copied[:3], {**copied[3], "content": "b"}], history) == 3
