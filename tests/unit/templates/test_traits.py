"""`detect_traits` on the real chat templates (tests/data/chat_templates), and traits declared by hand."""

from __future__ import annotations

import pytest

from polar_cli.errors import ConfigError
from polar_cli.templates import ChatTemplate, TemplateError
from polar_cli.templates.traits import PROBES, TemplateTraits, detect_traits
from tests.support import templates

# what each real template does, found by rendering (tests/data/chat_templates/README.md says the same in words)
DETECTED = {
    "qwen3": ("no_developer_role",),
    "qwen3.5": ("single_leading_system", "needs_user_query", "no_developer_role", "needs_object_arguments"),
    "qwen3.6-unsloth": ("drops_later_system", "needs_object_arguments"),
    "nemotron-3-super": ("needs_object_arguments",),
    "gpt-oss": ("drops_later_system", "needs_call_before_tool_result", "one_tool_call_per_message"),
    "gemma-4": ("needs_call_before_tool_result",),
    "ministral-3": ("single_leading_system", "no_developer_role", "alternating_roles", "needs_answer_before_user"),
    "ministral-3-reasoning": (
        "single_leading_system",
        "no_developer_role",
        "alternating_roles",
        "needs_answer_before_user",
    ),
    "devstral-small-2507": ("no_developer_role",),
    "glm-4.6": ("no_developer_role", "needs_object_arguments"),
    "deepseek-v3.1": ("no_developer_role", "hoists_later_system"),
    "kimi-k2": (),
    "minimax-m2": (
        "drops_later_system",
        "no_developer_role",
        "needs_call_before_tool_result",
        "needs_object_arguments",
    ),
    "llama-3.1": ("one_tool_call_per_message",),
}


@pytest.mark.parametrize("name", templates.NAMES)
def test_the_traits_of_each_real_template(name: str) -> None:
    template = templates.template(name)
    assert detect_traits(template).held == DETECTED[template.name]


def test_detection_is_cached_per_template_source() -> None:
    template = templates.template("qwen3.5")
    again = ChatTemplate(template.source, "another name", dict(template.variables))
    assert detect_traits(again) is detect_traits(template)


def test_every_trait_has_a_probe_and_the_controls_render_but_where_a_probe_is_moot() -> None:
    assert {t for p in PROBES for t in (p.refused, p.dropped, p.moved) if t} == set(TemplateTraits.names())
    undecided = set()
    for name in templates.NAMES:
        for probe in PROBES:
            try:
                templates.template(name).render(probe.control)
            except TemplateError:
                undecided.add((templates.template(name).name, probe.name))
    # qwen3.5 and Ministral 3 already refuse the second system message that the third-system probe's control has
    assert undecided == {(name, "third_system") for name in ("qwen3.5", "ministral-3", "ministral-3-reasoning")}


def test_a_template_that_refuses_everything_decides_nothing() -> None:
    assert detect_traits(ChatTemplate("{{ raise_exception('no') }}")) == TemplateTraits()


def test_a_template_that_renders_only_the_last_message_drops_what_it_can_drop() -> None:
    last_only = ChatTemplate(
        "{{ messages[-1].content }}{% for c in messages[-1].tool_calls or [] %}{{ c }}{% endfor %}"
    )
    traits = detect_traits(last_only)
    assert traits.drops_later_system and traits.no_developer_role and not traits.single_leading_system


def test_traits_declared_by_hand() -> None:
    traits = TemplateTraits.from_mapping({"single_leading_system": True, "needs_user_query": False})
    assert traits.held == ("single_leading_system",)
    assert TemplateTraits.from_mapping(traits.as_mapping()) == traits
    assert TemplateTraits.from_mapping({}) == TemplateTraits()


def test_unknown_or_non_boolean_traits_are_refused_by_name() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown template trait\(s\) single_system, z; known: single_leading_system"
    ):
        TemplateTraits.from_mapping({"z": True, "single_system": True})
    with pytest.raises(ConfigError, match=r"needs_user_query: must be true or false"):
        TemplateTraits.from_mapping({"needs_user_query": "yes"})


def test_a_template_that_hoists_system_text_moves_it_and_one_that_keeps_it_in_place_does_not() -> None:
    hoisting = ChatTemplate(
        "{% for m in messages if m.role == 'system' %}{{ m.content }}{% endfor %}"
        "{% for m in messages if m.role != 'system' %}{{ m.role }}: {{ m.content }}{% endfor %}"
    )
    in_place = ChatTemplate("{% for m in messages %}{{ m.role }}: {{ m.content }}{% endfor %}")
    assert detect_traits(hoisting).hoists_later_system and not detect_traits(hoisting).drops_later_system
    assert not detect_traits(in_place).hoists_later_system


def test_a_template_that_demands_alternation_refuses_users_in_a_row_and_a_user_after_tool_results() -> None:
    strict = ChatTemplate(
        "{% set ns = namespace(last='') %}{% for m in messages if m.role in ('user', 'tool') %}"
        "{% if m.role == 'user' and ns.last in ('user', 'tool') %}{{ raise_exception('roles must alternate') }}"
        "{% endif %}{% set ns.last = m.role %}{{ m.content }}{% endfor %}"
    )
    traits = detect_traits(strict)
    assert traits.alternating_roles and traits.needs_answer_before_user and not traits.single_leading_system
