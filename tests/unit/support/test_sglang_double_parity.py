"""Parity: on every recorded harness call, the double's SGLang path renders what the product's own mirror of that step
(`polar_cli.templates.ChatTemplate.render`) renders, on each of the six real templates, refusals included.

Each recording is decoded by its codec and sent on as the gateway sends it (`chat_body`); the double's text is what
SGLang 0.5.23 would feed the model, the mirror's what Polar believes it fed.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any
from urllib.parse import urlencode

import pytest
from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest, Tool

from polar_cli.templates import TemplateError
from polar_cli.templates import sglang_tools as product_sglang_tools
from polar_cli.translate.registry import CODECS, route_for_path
from polar_cli.translate.upstream import UpstreamOptions, chat_body
from tests.support import templates
from tests.support.recordings import recorded
from tests.support.sglang_chat import Refusal, SGLangTemplate

# The Qwen templates write each tool whole (`tool | tojson`), and SGLang hands them Tool.model_dump(), whose unset
# wrapper-level defer_loading comes along: `{"type": "function", "function": {...}, "defer_loading": null}`; the
# product's `templates.sglang_tools` shapes tools the same way.


@cache
def upstream_bodies() -> tuple[tuple[str, dict[str, Any]], ...]:
    out = []
    for record in recorded():
        route = route_for_path(record["path"], urlencode(record.get("query") or {}, doseq=True))
        assert route is not None, record["path"]
        request = CODECS[route.api].decode_request(record["body"], route)
        label = f"{record['harness']}/{record['run']}/{record['seq']}"
        out.append((label, chat_body(request, UpstreamOptions(), rid="rid")))
    return tuple(out)


def sglang_render(model: SGLangTemplate, body: dict[str, Any]) -> str | Refusal:
    try:
        text = model.prompt(ChatCompletionRequest.model_validate(copy.deepcopy(body))).text
    except Refusal as exc:
        return exc
    assert text is not None
    return text


def mirror_render(name: str, body: dict[str, Any], *, sglang_tools: bool) -> str | TemplateError:
    tools = body.get("tools") if body.get("tool_choice") != "none" else None
    if tools and sglang_tools:
        tools = [Tool.model_validate(t).model_dump() for t in tools]
    elif tools:
        tools = product_sglang_tools(tools)
    try:
        return templates.template(name).render(body["messages"], tools, body.get("chat_template_kwargs"))
    except TemplateError as exc:
        return exc


def compare(name: str, *, sglang_tools: bool) -> tuple[list[str], int, int]:
    """(mismatches, calls rendered by both, calls refused by both with the same message)."""
    model = SGLangTemplate(name)
    mismatches, rendered, refused = [], 0, 0
    for label, body in upstream_bodies():
        ours, theirs = sglang_render(model, body), mirror_render(name, body, sglang_tools=sglang_tools)
        if isinstance(ours, Refusal) and isinstance(theirs, TemplateError):
            if (ours.status, ours.message) == (400, str(theirs)):
                refused += 1
                continue
        elif ours == theirs:
            rendered += 1
            continue
        mismatches.append(f"{label}: {_difference(ours, theirs)}")
    return mismatches, rendered, refused


def _difference(ours: str | Refusal, theirs: str | TemplateError) -> str:
    if not (isinstance(ours, str) and isinstance(theirs, str)):
        return f"SGLang {ours!r} vs mirror {theirs!r}"
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), min(len(ours), len(theirs)))
    return f"at {at}: SGLang {ours[at - 40 : at + 40]!r} vs mirror {theirs[at - 40 : at + 40]!r}"


def test_there_are_recordings() -> None:
    assert len(upstream_bodies()) == 72


@pytest.mark.parametrize("name", templates.NAMES)
def test_the_mirror_renders_what_sglang_renders_given_sglangs_tool_objects(name: str) -> None:
    mismatches, rendered, refused = compare(name, sglang_tools=True)
    assert mismatches == []
    assert rendered + refused == len(upstream_bodies())
    assert rendered > 0


@pytest.mark.parametrize("name", templates.NAMES)
def test_the_mirror_renders_what_sglang_renders(name: str) -> None:
    """With the product's own `sglang_tools` (what the scripted engines render with), not SGLang's models."""
    mismatches, rendered, refused = compare(name, sglang_tools=False)
    assert mismatches == [] and rendered + refused == len(upstream_bodies())


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "function", "function": {"name": "ls"}},
        {"type": "function", "function": {"parameters": {"type": "object"}, "name": "ls", "description": "d"}},
        {"type": "function", "function": {"name": "ls", "strict": True, "x-extra": 1}, "defer_loading": True},
        {"function": {"name": "ls", "defer_loading": False, "description": None}},
    ],
)
def test_the_products_tool_shape_is_sglangs_model_dump(tool: dict[str, Any]) -> None:
    assert product_sglang_tools([tool]) == [Tool.model_validate(tool).model_dump()]
    assert list(product_sglang_tools([tool])[0]["function"]) == list(Tool.model_validate(tool).model_dump()["function"])
