"""The tail of a continuation rendered from a window of the history: the same ids as the full rendering, or none.

Every real template in tests/data/chat_templates runs a long tool loop (reasoning on and off, text beside calls,
parallel calls where the template takes them, a user message half-way); at each step the window's tail must tokenise
to exactly the full rendering's ids, or the window must decline. Templates made to look across the conversation
(counting results, reading the history's length) must make it decline.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from polar_cli.gateway.continuation import answer_message
from polar_cli.gateway.tail import TailRender, full_tail, tail_text, tail_windows, window_tail
from polar_cli.templates import ChatTemplate
from polar_cli.templates.chat import TemplateError
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
ROUNDS = 14
USER_AT = 8  # the round whose new messages end with a user message


def _calls(i: int, n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"call_{i}_{j}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"c": f"{i}{j}"})},
        }
        for j in range(n)
    ]


def _answer(render: TailRender, history: list[dict[str, Any]], i: int, thinking: bool) -> dict[str, Any]:
    """Round i's answer: text beside the calls every third round, two calls every other; simpler where the template
    refuses that (Llama 3.1 takes one call a turn, gpt-oss no text beside reasoning)."""
    reasoning = f"Step {i}: look closer." if thinking else None
    shapes = [("Checking." if i % 3 == 0 else "", 1 + i % 2), ("", 1 + i % 2), ("", 1)]
    for text, n in shapes:
        answer = answer_message(text, reasoning, _calls(i, n))
        try:
            render.template.render([*history, answer], TOOLS, render.kwargs, generation_prompt=False)
        except TemplateError:
            continue
        return answer
    raise AssertionError("the template takes no tool call")


def _new(answer: dict[str, Any], i: int) -> list[dict[str, Any]]:
    results = [{"role": "tool", "tool_call_id": c["id"], "content": f"out {c['id']}\n"} for c in answer["tool_calls"]]
    return [*results, {"role": "user", "content": "Also run the tests."}] if i == USER_AT else results


@pytest.mark.parametrize("thinking", [False, True])
@pytest.mark.parametrize("name", templates.NAMES)
def test_the_window_gives_the_full_renderings_ids_or_declines_over_a_long_tool_loop(name: str, thinking: bool) -> None:
    tk = templates.tokenizer(name)
    render = TailRender(tk.template, TOOLS, {"enable_thinking": thinking}, tk.turn_ends)
    messages: list[dict[str, Any]] = list(START)
    windowed = 0
    for i in range(ROUNDS):
        answer = _answer(render, messages, i, thinking)
        history, new = [*messages, answer], _new(answer, i)
        try:
            full = full_tail(render, history, new)
        except TemplateError:  # the template refuses the user message after results (the Mistral family)
            assert i == USER_AT
            with pytest.raises(TemplateError):
                tail_text(render, history, new)
            new = new[:-1]
            full = full_tail(render, history, new)
        assert full is not None
        fast = window_tail(render, history, new)
        if fast is not None:
            windowed += 1
            assert tk.vocab.encode(fast) == tk.vocab.encode(full), f"round {i}"
        assert tail_text(render, history, new) == full
        messages = [*history, *new]
    # the first two rounds are short enough to render in full; every other round of the loop takes the window
    assert windowed >= ROUNDS - 3


@pytest.mark.parametrize("name", ["qwen3", "qwen3.5", "qwen3.6-unsloth", "nemotron-3-super", "minimax-m2", "glm-4.6"])
def test_a_new_user_message_that_rewrites_an_earlier_turns_reasoning_is_rendered_in_full(name: str) -> None:
    """These templates drop reasoning before the last user message: the window sees it and declines."""
    tk = templates.tokenizer(name)
    render = TailRender(tk.template, TOOLS, {"enable_thinking": True}, tk.turn_ends)
    first, second, third = (answer_message("", f"Thought {i}.", _calls(i, 1)) for i in range(3))
    history = [*START, first, *_new(first, 0), second, *_new(second, 1), third]
    results = _new(third, 2)
    assert window_tail(render, history, results) is not None
    new = [*results, {"role": "user", "content": "Now the docs."}]
    assert window_tail(render, history, new) is None
    assert tail_text(render, history, new) == full_tail(render, history, new)


COUNTING = ChatTemplate(
    "{%- set ns = namespace(results=0) -%}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'tool' %}{% set ns.results = ns.results + 1 %}<r{{ ns.results }}>{{ m.content }}<end>"
    "{%- elif m.tool_calls is defined %}<a>{{ m.tool_calls[0].function.name }}<end>"
    "{%- else %}<{{ m.role }}>{{ m.content }}<end>{%- endif -%}"
    "{%- endfor -%}{%- if add_generation_prompt %}<a>{%- endif -%}",
    "counting",
)
LENGTH = ChatTemplate(
    "{%- for m in messages -%}<{{ m.role }}>{{ m.content }}<end>{%- endfor -%}"
    "{%- if add_generation_prompt %}<a turn={{ messages|length }}>{%- endif -%}",
    "length",
)


@pytest.mark.parametrize("template", [COUNTING, LENGTH], ids=lambda t: t.name)
def test_a_template_that_counts_across_the_conversation_is_rendered_in_full(template: ChatTemplate) -> None:
    render = TailRender(template, None, None, ("<end>",))
    messages: list[dict[str, Any]] = list(START)
    for i in range(4):
        answer = answer_message("", None, _calls(i, 1))
        history, new = [*messages, answer], _new(answer, i)
        assert window_tail(render, history, new) is None
        assert tail_text(render, history, new) == full_tail(render, history, new)
        messages = [*history, *new]


def test_windows_keep_the_leading_system_the_last_user_the_previous_round_and_the_answer() -> None:
    first, second, third = (answer_message("", None, _calls(i, 1)) for i in range(3))
    history = [*START, first, *_new(first, 0), second, *_new(second, 1), third]
    small, large = tail_windows(history, _new(third, 2)) or ([], [])
    assert small == [*START, third]
    assert large == [*START, second, *_new(second, 1), third]
    # nothing to drop: the whole conversation is rendered
    assert tail_windows([*START, second, *_new(second, 1), third], _new(third, 2)) is None
    assert tail_windows([*START, third], _new(third, 2)) is None


def test_windows_decline_a_later_system_message_and_a_result_for_an_earlier_call() -> None:
    first, second, third = (answer_message("", None, _calls(i, 1)) for i in range(3))
    history = [*START, first, *_new(first, 0), second, *_new(second, 1), third]
    assert tail_windows(history, _new(third, 2)) is not None
    reminder = {"role": "system", "content": "Be brief."}
    assert tail_windows([*history[:4], reminder, *history[4:]], _new(third, 2)) is None
    assert tail_windows(history, _new(second, 1)) is None  # answers call_1_0, not the answer's call_2_0
