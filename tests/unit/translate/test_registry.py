from __future__ import annotations

import json
from pathlib import Path

import pytest

from polar_cli.translate.codec import Route
from polar_cli.translate.registry import error_codec_for_path, route_for_path, route_for_unknown_path
from tests.support.recordings import API_OF_LABEL

DATA = Path(__file__).parents[2] / "data" / "harness_requests"


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/v1/messages", Route("anthropic_messages")),
        ("/messages", Route("anthropic_messages")),
        ("/v1/chat/completions", Route("openai_chat")),
        ("/chat/completions/", Route("openai_chat")),
        ("/v1/responses", Route("openai_responses")),
        ("/openai/v1/responses", Route("openai_responses")),
        ("/v1beta/models/gemini-2.5-pro:streamGenerateContent", Route("google_genai", "gemini-2.5-pro", True, False)),
        ("/v1/models/gemini-x:generateContent", Route("google_genai", "gemini-x", False, False)),
        ("/v1/models", None),
        ("/v1/messages/count_tokens", None),
        ("/health", None),
    ],
)
def test_route_by_path(path: str, route: Route | None) -> None:
    assert route_for_path(path) == route


@pytest.mark.parametrize(
    ("query", "sse"), [("alt=sse", True), ("key=k&alt=sse", True), ("", False), ("alt=json", False)]
)
def test_google_streams_as_sse_only_when_asked(query: str, sse: bool) -> None:
    route = route_for_path("/v1beta/models/g:streamGenerateContent", query)
    assert route is not None and route.sse is sse
    # the other APIs only ever stream server-sent events
    assert route_for_path("/v1/messages", query) == Route("anthropic_messages", sse=True)


def test_every_recorded_harness_request_is_routed_to_its_api() -> None:
    seen = 0
    for f in DATA.glob("*.jsonl"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            if r.get("api"):
                route = route_for_path(r["path"])
                assert route is not None and route.api == API_OF_LABEL[r["api"]], r["path"]
                seen += 1
    assert seen == 72  # every model call recorded from the six harnesses


def test_unknown_paths_guess_from_headers_then_body_but_never_for_other_endpoints() -> None:
    assert route_for_unknown_path("/", {"anthropic-version": "2023-06-01"}, {}) == Route("anthropic_messages")
    assert route_for_unknown_path("/", {}, {"input": "hi"}) == Route("openai_responses")
    assert route_for_unknown_path("/", {}, {"messages": []}) == Route("openai_chat")
    assert route_for_unknown_path("/", {}, {"messages": [], "max_tokens": 5, "system": []}) == Route(
        "anthropic_messages"
    )
    assert route_for_unknown_path("/v1/models", {"anthropic-version": "x"}, {"messages": []}) is None
    assert route_for_unknown_path("/", {}, {"contents": []}) is None


def test_errors_before_the_body_take_the_shape_the_path_suggests() -> None:
    assert error_codec_for_path("/v1beta/models/x:generateContent").name == "google_genai"
    assert error_codec_for_path("/v1/messages/count_tokens").name == "anthropic_messages"
    assert error_codec_for_path("/nowhere").name == "openai_chat"
