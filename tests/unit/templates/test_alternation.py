"""The rules for templates that demand alternating turns (Ministral 3) or hoist later system text (DeepSeek-V3.1),
on hand-made conversations and on the real templates."""

from __future__ import annotations

import pytest

from polar_cli.templates import TemplateError
from polar_cli.templates.normalize import make_template_safe, merge_consecutive_users, unfit
from polar_cli.templates.traits import detect_traits
from tests.support import templates

SYSTEM = {"role": "system", "content": "sys"}
CALL = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"cmd": "ls"}'}}


def test_users_in_a_row_become_one_with_their_texts_in_order() -> None:
    parts = [{"type": "text", "text": "b"}]
    messages = [SYSTEM, {"role": "user", "content": "a"}, {"role": "user", "content": parts}, {"role": "user"}]
    assert merge_consecutive_users(messages) == [
        SYSTEM,
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "\n\n"}, *parts]},
    ]
    alternating = [SYSTEM, {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert merge_consecutive_users(alternating) is alternating


@pytest.mark.parametrize("name", ["ministral-3", "ministral-3-reasoning"])
def test_ministral_refuses_users_in_a_row_which_the_rule_mends(name: str) -> None:
    template = templates.template(name)
    messages = [SYSTEM, {"role": "user", "content": "u1"}, {"role": "user", "content": "u2"}]
    with pytest.raises(TemplateError, match="roles must alternate"):
        template.render(messages)
    safe, rules = make_template_safe(messages, detect_traits(template))
    assert rules == ("merge_consecutive_users",)
    text = template.render(safe)
    assert text.index("u1") < text.index("u2")
    assert unfit(safe, detect_traits(template)) is None


@pytest.mark.parametrize("name", ["ministral-3", "ministral-3-reasoning"])
def test_a_user_after_tool_results_is_unfit_for_ministral_and_named(name: str) -> None:
    template = templates.template(name)
    traits = detect_traits(template)
    messages = [
        {"role": "user", "content": "u1"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "c1", "content": "r1"},
        {"role": "user", "content": "u2"},
    ]
    safe, _ = make_template_safe(messages, traits)
    with pytest.raises(TemplateError, match="roles must alternate"):
        template.render(safe)
    with pytest.raises(TemplateError, match="Assistant message must have"):  # an empty answer would not do either
        template.render([*safe[:3], {"role": "assistant", "content": ""}, safe[3]])
    found = unfit(safe, traits)
    assert found is not None and (found.trait, found.index) == ("needs_answer_before_user", 3)
    assert found.message.startswith("the model's chat template cannot take this conversation (needs_answer_before_user")
    assert unfit(safe, detect_traits(templates.template("qwen3.5"))) is None


def test_deepseek_renders_a_later_system_turn_in_place_once_made_safe() -> None:
    template = templates.template("deepseek-v3.1")
    messages = [SYSTEM, {"role": "user", "content": "first"}, {"role": "system", "content": "reminder"}]
    assert template.render(messages).index("reminder") < template.render(messages).index("first")  # hoisted
    safe, rules = make_template_safe(messages, detect_traits(template))
    assert rules == ("later_system_as_user",)
    text = template.render(safe)
    assert text.index("first") < text.index("reminder")
