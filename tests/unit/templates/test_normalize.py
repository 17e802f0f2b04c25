"""Each rule of polar_cli/templates/normalize.py on recorded harness traffic (or, where no recording has the case, on
a recording changed to have it, as each test says), rendered with the real template that needs it."""

from __future__ import annotations

import copy
import json
from typing import Any
from urllib.parse import urlencode

import pytest

from polar_cli.templates import TemplateError
from polar_cli.templates.normalize import (
    RULES,
    developer_as_system,
    ensure_user_query,
    fold_leading_system,
    later_system_as_user,
    make_template_safe,
    object_tool_arguments,
    orphan_tool_results_as_user,
    split_parallel_tool_calls,
)
from polar_cli.templates.traits import TemplateTraits, detect_traits
from polar_cli.translate.registry import CODECS, route_for_path
from polar_cli.translate.upstream import UpstreamOptions, chat_body
from tests.support import templates
from tests.support.recordings import find_body, recorded

RECORDS = recorded()


def upstream(harness: str, run: str, seq: int, edit: Any = None) -> dict[str, Any]:
    """The upstream body of one recorded call, its harness body first changed by ``edit`` when given."""
    record = next(r for r in RECORDS if (r["harness"], r["run"], r["seq"]) == (harness, run, seq))
    body = copy.deepcopy(find_body(RECORDS, harness, run, seq))
    if edit is not None:
        edit(body)
    route = route_for_path(record["path"], urlencode(record.get("query") or {}, doseq=True))
    assert route is not None
    return chat_body(CODECS[route.api].decode_request(body, route), UpstreamOptions(), rid="rid")


def render(name: str, messages: list[dict[str, Any]], body: dict[str, Any] | None = None) -> str:
    body = body or {}
    return templates.template(name).render(messages, body.get("tools"), body.get("chat_template_kwargs"))


def test_fold_leading_system_makes_codexs_two_developer_messages_one() -> None:
    body = upstream("codex", "codex_tool", 5)
    messages = body["messages"]
    folded = fold_leading_system(messages)
    assert [m["role"] for m in folded] == ["system", "user", "user", "assistant", "tool"]
    assert folded[0]["content"] == f"{messages[0]['content']}\n\n{messages[1]['content']}"
    assert folded[1:] == messages[2:]
    text = render("qwen3.5", folded, body)
    assert messages[0]["content"].strip()[-200:] in text and messages[1]["content"].strip()[-200:] in text


def test_later_system_as_user_keeps_claude_codes_environment_turn_in_place_as_a_system_reminder() -> None:
    body = upstream("claude-code", "claude_tool", 2)
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "system", "assistant", "tool"]
    moved = later_system_as_user(messages)
    assert [m["role"] for m in moved] == ["system", "user", "user", "assistant", "tool"]
    assert moved[2]["content"] == f"<system-reminder>\n{messages[2]['content']}\n</system-reminder>"
    assert moved[:2] == messages[:2] and moved[3:] == messages[3:]
    text = render("qwen3.5", moved, body)
    assert (
        text.index("create hello.txt containing hi") < text.index(moved[2]["content"]) < text.index("<function=Bash>")
    )


def test_a_later_system_message_that_is_already_a_reminder_is_not_wrapped_twice() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "system", "content": "<system-reminder>\nx\n</system-reminder>"},
    ]
    assert later_system_as_user(messages)[1] == {"role": "user", "content": messages[1]["content"]}
    parts = [{"role": "user", "content": "go"}, {"role": "system", "content": [{"type": "text", "text": "x"}]}]
    wrapped = later_system_as_user(parts)[1]["content"]
    assert [p["text"] for p in wrapped] == ["<system-reminder>\n", "x", "\n</system-reminder>"]


def test_a_system_message_between_a_call_and_its_result_goes_after_the_result() -> None:
    """Claude Code's tool round with its environment turn moved between the call and the result."""
    system, call, result = upstream("claude-code", "claude_tool", 2)["messages"][2:]
    messages = [*upstream("claude-code", "claude_tool", 2)["messages"][:2], call, system, result]
    moved = later_system_as_user(messages)
    assert [m["role"] for m in moved] == ["system", "user", "assistant", "tool", "user"]
    assert moved[2:4] == [call, result] and system["content"] in moved[4]["content"]
    out, applied = make_template_safe(messages, detect_traits(templates.template("gpt-oss")))
    assert out == moved and applied == ("later_system_as_user",)  # the result still answers its call


def test_developer_as_system_for_templates_that_drop_or_refuse_the_role() -> None:
    """No harness sends a developer message upstream (the codecs map it to system): Codex's, marked back."""
    codex = upstream("codex", "codex_text", 4)["messages"]
    messages = [{**m, "role": "developer"} if m["role"] == "system" else m for m in codex]
    with pytest.raises(TemplateError, match="Unexpected message role"):
        render("qwen3.5", messages)
    assert messages[0]["content"][-100:] not in render("qwen3", messages)  # qwen3 drops it
    fixed = developer_as_system(messages)
    assert [m["role"] for m in fixed[:2]] == ["system", "system"]
    assert messages[0]["content"][-100:] in render("qwen3", fixed)


def test_ensure_user_query_for_a_responses_call_of_only_tool_calls_and_their_outputs() -> None:
    """No recording lacks a user message: Codex's tool call with its user items removed."""
    body = upstream(
        "codex", "codex_tool", 5, lambda b: b.update(input=[i for i in b["input"] if i.get("role") != "user"])
    )
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["system", "system", "assistant", "tool"]
    with pytest.raises(TemplateError, match="No user query found"):
        render("qwen3.5", fold_leading_system(messages), body)
    fixed = ensure_user_query(fold_leading_system(messages))
    assert [m["role"] for m in fixed] == ["system", "user", "assistant", "tool"] and fixed[1]["content"] == ""
    assert "exec_command" in render("qwen3.5", fixed, body)


def _orphaned(body: dict[str, Any]) -> None:
    body["messages"] = [m for m in body["messages"] if m["role"] != "assistant"]


def test_orphan_tool_results_as_user_for_a_result_whose_call_is_gone() -> None:
    """No recording has one (every result answers a call): Pi's chat call with the assistant turn removed."""
    body = upstream("pi", "pi_tool_oai", 2, _orphaned)
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "tool"]
    with pytest.raises(TemplateError, match="no previous assistant message with a tool call"):
        render("gpt-oss", messages, body)
    assert "(no output)" not in render("gemma-4", messages, body)
    fixed = orphan_tool_results_as_user(messages)
    assert fixed[2] == {"role": "user", "content": "(no output)"}
    assert "(no output)" in render("gpt-oss", fixed, body) and "(no output)" in render("gemma-4", fixed, body)
    answered = upstream("pi", "pi_tool_oai", 2)["messages"]
    assert orphan_tool_results_as_user(answered) is answered


def test_orphans_move_after_the_results_that_answer_the_call() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "zz", "content": "stray"},
        {"role": "tool", "tool_call_id": "c1", "content": "answer"},
    ]
    assert orphan_tool_results_as_user(messages)[2:] == [messages[3], {"role": "user", "content": "stray"}]


def _second_call(body: dict[str, Any]) -> None:
    turn, results = body["messages"][-2:]  # the assistant's tool_use, the user's tool_result
    turn["content"].append({**turn["content"][0], "id": "toolu_2", "input": {"command": "cat hello.txt"}})
    results["content"].append({**results["content"][0], "tool_use_id": "toolu_2", "content": "hi"})


def test_split_parallel_tool_calls_gives_gpt_oss_one_call_per_turn_each_with_its_result() -> None:
    """No recording has parallel calls: Claude Code's Bash call with a second one added."""
    body = upstream("claude-code", "claude_tool", 2, _second_call)
    messages = later_system_as_user(body["messages"])
    assert [len(m.get("tool_calls") or ()) for m in messages] == [0, 0, 0, 2, 0, 0]
    assert "cat hello.txt" not in render("gpt-oss", messages, body)  # only the first call is rendered
    split = split_parallel_tool_calls(messages)
    assert [(m["role"], m.get("tool_call_id") or len(m.get("tool_calls") or ())) for m in split[3:]] == [
        ("assistant", 1), ("tool", messages[3]["tool_calls"][0]["id"]), ("assistant", 1), ("tool", "toolu_2")
    ]  # fmt: skip
    text = render("gpt-oss", split, body)
    first, second = text.index("echo hi > hello.txt"), text.index("cat hello.txt")
    assert first < text.index("(Bash completed with no output)") < second < text.rindex("functions.Bash to=assistant")


def test_object_tool_arguments_for_empty_and_non_json_arguments() -> None:
    """Recorded arguments are all JSON objects: Pi's call with its arguments emptied, then made plain text."""
    for arguments, expected in (("", "{}"), ("echo hi > hello.txt", '{"input":"echo hi > hello.txt"}')):
        messages = copy.deepcopy(upstream("pi", "pi_tool_oai", 2)["messages"])
        messages[2]["tool_calls"][0]["function"]["arguments"] = arguments
        with pytest.raises(TemplateError, match="Can only get item pairs from a mapping"):
            render("qwen3.5", messages)
        fixed = object_tool_arguments(messages)
        assert fixed[2]["tool_calls"][0]["function"]["arguments"] == expected
        assert json.loads(expected).get("input", "<function=bash>") in render("qwen3.5", fixed)
        assert json.loads(expected).get("input", "<function=bash>") in render("qwen3.6-unsloth", fixed)


@pytest.mark.parametrize("harness_call", [("claude-code", "claude_tool", 2), ("codex", "codex_tool", 5)])
def test_make_template_safe_is_pure_and_names_the_rules_it_applied(harness_call: tuple[str, str, int]) -> None:
    messages = upstream(*harness_call)["messages"]
    untouched = copy.deepcopy(messages)
    everything = TemplateTraits(**dict.fromkeys(TemplateTraits.names(), True))
    out, applied = make_template_safe(messages, everything)
    assert messages == untouched
    assert applied and set(applied) <= {rule.__name__ for rule, _ in RULES}
    assert make_template_safe(out, everything) == (out, ())  # nothing left to do
    assert make_template_safe(messages, TemplateTraits()) == (messages, ())
    assert make_template_safe(messages, detect_traits(templates.template("qwen3")))[1] == ()


def test_every_rule_returns_its_input_when_there_is_nothing_to_do() -> None:
    messages = upstream("pi", "pi_tool_oai", 2)["messages"]
    for rule, _ in RULES:
        assert rule(messages) is messages, rule.__name__
