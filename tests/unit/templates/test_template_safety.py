"""Every recorded model call of every harness, made template-safe for each real chat template in
tests/data/chat_templates, renders and keeps all of the harness's text in order; without the rules, Qwen3.5 refuses
Claude Code and Codex, Ministral 3 refuses four harnesses of six, others drop text or move it.

Each call is decoded by its codec and turned into the upstream body by `chat_body` (default options), as the gateway
does. "Keeps all of the text" is checked in order, message by message: every text of every system, user and
assistant message, every tool result, every tool call's name and then its argument values (in any order within the
call: Gemma 4 sorts them by key). A text may come back trimmed (the Qwen templates trim message content) and, for
tool results and argument values only, JSON-escaped (gpt-oss writes both with ``tojson``). Reasoning is not
checked: templates drop earlier turns' reasoning by design.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any
from urllib.parse import urlencode

import pytest

from polar_cli.templates import TemplateError
from polar_cli.templates.normalize import make_template_safe
from polar_cli.templates.traits import detect_traits
from polar_cli.translate.registry import CODECS, route_for_path
from polar_cli.translate.upstream import UpstreamOptions, chat_body
from tests.support import templates
from tests.support.recordings import recorded


def _upstream_bodies() -> dict[str, tuple[str, dict[str, Any]]]:
    """Each recorded call's upstream body, by ``harness-run-seq``, with its harness."""
    out = {}
    for record in recorded():
        route = route_for_path(record["path"], urlencode(record.get("query") or {}, doseq=True))
        assert route is not None
        request = CODECS[route.api].decode_request(record["body"], route)
        key = f"{record['harness']}-{record['run']}-{record['seq']}"
        out[key] = (record["harness"], chat_body(request, UpstreamOptions(), rid="rid"))
    return out


BODIES = _upstream_bodies()


def stem(name: str) -> str:
    return templates.case(name).file.removesuffix(".jinja")


def render(name: str, body: dict[str, Any], messages: list[dict[str, Any]]) -> str:
    return templates.template(name).render(messages, body.get("tools"), body.get("chat_template_kwargs"))


# --- what "keeps all of the text" means ---------------------------------------------------------------------------


def _forms(text: str, escaped: bool) -> list[str]:
    forms = [text, text.strip()]
    if escaped:
        forms += [json.dumps(f, ensure_ascii=False)[1:-1] for f in forms]
    return [f for f in dict.fromkeys(forms) if f]


def _leaves(value: Any) -> list[str | list[str]]:
    """What an argument value must show: each string in it, and each other scalar in its JSON or Python spelling."""
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    if isinstance(value, str):
        return [value]
    return [] if value is None else [[json.dumps(value), str(value)]]


def _texts(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if isinstance(content, str):
        return [content]
    return [p["text"] for p in content or () if p.get("type") == "text"]


def _find(rendered: str, forms: list[str], start: int) -> tuple[int, int] | None:
    hits = [(at, at + len(f)) for f in forms if (at := rendered.find(f, start)) >= 0]
    return min(hits) if hits else None


def unrendered(rendered: str, messages: list[dict[str, Any]]) -> list[str]:
    """The harness texts of ``messages`` that ``rendered`` does not show in order (see the module docstring)."""
    missing: list[str] = []
    cursor = 0
    for i, message in enumerate(messages):
        for text in _texts(message):
            forms = _forms(text, escaped=message["role"] == "tool")
            if not forms:
                continue
            hit = _find(rendered, forms, cursor)
            if hit is None:
                missing.append(f"messages[{i}] ({message['role']}): {text[:60]!r}")
            else:
                cursor = hit[1]
        for call in message.get("tool_calls") or ():
            name = call["function"]["name"]
            hit = _find(rendered, [name], cursor)
            if hit is None:
                missing.append(f"messages[{i}] call {name}")
                continue
            after_name, end = hit[1], hit[1]
            for leaf in _leaves(json.loads(call["function"]["arguments"])):
                value = _find(rendered, _forms(leaf, escaped=True) if isinstance(leaf, str) else leaf, after_name)
                if value is None:
                    missing.append(f"messages[{i}] call {name} argument {leaf!r:.60}")
                else:
                    end = max(end, value[1])
            cursor = end
    return missing


# --- the matrix -----------------------------------------------------------------------------------------------------

MATRIX = [pytest.param(name, key, id=f"{stem(name)}-{key}") for name in templates.NAMES for key in BODIES]


@pytest.mark.parametrize(("name", "key"), MATRIX)
def test_every_recorded_call_renders_with_all_its_text_once_made_template_safe(name: str, key: str) -> None:
    _, body = BODIES[key]
    messages, _ = make_template_safe(body["messages"], detect_traits(templates.template(name)))
    assert unrendered(render(name, body, messages), body["messages"]) == []


def _keys(*harnesses: str) -> list[str]:
    return [k for k, (harness, _) in BODIES.items() if harness in harnesses]


def test_without_the_rules_qwen3_5_refuses_every_claude_code_and_codex_call() -> None:
    keys = _keys("claude-code", "codex")
    assert len(keys) == 17
    for key in keys:
        _, body = BODIES[key]
        with pytest.raises(TemplateError, match="System message must be at the beginning"):
            render("qwen3.5", body, body["messages"])


def test_without_the_rules_qwen3_6_and_gpt_oss_drop_system_text_silently() -> None:
    for key in _keys("claude-code"):
        _, body = BODIES[key]
        later = f"messages[2] (system): {body['messages'][2]['content'][:60]!r}"
        for name in ("qwen3.6-unsloth", "gpt-oss"):
            assert unrendered(render(name, body, body["messages"]), body["messages"]) == [later], (name, key)
    for key in _keys("codex"):  # gpt-oss renders only the first of Codex's two developer messages
        _, body = BODIES[key]
        assert [m.split(" ")[0] for m in unrendered(render("gpt-oss", body, body["messages"]), body["messages"])] == [
            "messages[1]"
        ]


_SYSTEM_RULES = {"claude-code": ("later_system_as_user",), "codex": ("fold_leading_system",)}
_MISTRAL_RULES = {
    "claude-code": ("later_system_as_user", "merge_consecutive_users"),
    "codex": ("fold_leading_system", "merge_consecutive_users"),
    "gemini-cli": ("merge_consecutive_users",),  # on the 6 of its 15 calls that send two user messages in a row
    "opencode": ("merge_consecutive_users",),  # on 6 of 13
}
# which rules fire, per template and harness (on every recorded call of that harness, but where said)
FIRED = {
    (t, h): rules
    for templates_, rules_by_harness in (
        (("qwen3.5", "qwen3.6-unsloth", "gpt-oss", "deepseek-v3.1", "minimax-m2"), _SYSTEM_RULES),
        (("ministral-3", "ministral-3-reasoning"), _MISTRAL_RULES),
    )
    for t in templates_
    for h, rules in rules_by_harness.items()
}
SOME_CALLS = {"gemini-cli": 6, "opencode": 6}


def test_the_rules_that_fire_on_the_recorded_traffic() -> None:
    fired: Counter[tuple[str, str, tuple[str, ...]]] = Counter()
    for name in templates.NAMES:
        traits = detect_traits(templates.template(name))
        for harness, body in BODIES.values():
            fired[stem(name), harness, make_template_safe(body["messages"], traits)[1]] += 1
    assert {(t, h): rules for (t, h, rules) in fired if rules} == FIRED
    per_harness = Counter(h for h, _ in BODIES.values())
    for (_, h, rules), count in fired.items():
        if rules:  # a rule fires on every call of the harness, or on the calls said
            assert count == (
                SOME_CALLS[h] if "merge_consecutive_users" in rules and h in SOME_CALLS else per_harness[h]
            )


def test_the_check_sees_a_dropped_argument_and_text_out_of_order() -> None:
    _, body = BODIES["pi-pi_tool_oai-2"]
    messages = body["messages"]
    text = render("qwen3.5", body, messages)
    assert unrendered(text, messages) == []
    assert unrendered(text.replace("echo hi > hello.txt", "?"), messages) == [
        "messages[2] call bash argument 'echo hi > hello.txt'"
    ]
    assert unrendered(text, [messages[0], messages[3], messages[1]]) == [
        f"messages[2] (user): {messages[1]['content']!r}"
    ]
