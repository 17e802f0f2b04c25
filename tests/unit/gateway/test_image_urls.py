"""Image URLs that would make the inference server fetch from its own side are refused: 400 in the caller's shape,
nothing sent upstream."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from polar_cli.gateway.handler import Gateway
from polar_cli.gateway.sessions import SessionRegistry
from polar_cli.translate.upstream import UpstreamOptions
from polar_cli.wire.http11 import Request
from tests.unit.gateway.test_handler import FakeUpstream

DATA = "data:image/png;base64,iVBORw0KGgo="
LOCAL = [
    "file:///etc/shadow",
    "http://169.254.169.254/latest/meta-data/",
    "http://127.0.0.1:30000/v1/models",
    "http://[::1]/x.png",
    "http://10.1.2.3/x.png",
    "https://192.168.0.1/x.png",
    "http://localhost/x.png",
    "http://0.0.0.0/x.png",
    "gopher://example.com/",
    "ftp://example.com/x.png",
    "x.png",
]


def body_for(api: str, url: str) -> tuple[str, dict[str, Any]]:
    if api == "anthropic_messages":
        part = {"type": "image", "source": {"type": "url", "url": url}}
        return "/v1/messages", {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": [part]}]}
    if api == "openai_chat":
        part = {"type": "image_url", "image_url": {"url": url}}
        return "/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": [part]}]}
    if api == "openai_responses":
        part = {"type": "input_image", "image_url": url}
        return "/v1/responses", {"model": "m", "input": [{"role": "user", "content": [part]}]}
    part = {"fileData": {"mimeType": "image/png", "fileUri": url}}
    return "/v1beta/models/m:generateContent", {"contents": [{"role": "user", "parts": [part]}]}


def call(api: str, url: str, *, remote: bool = False) -> tuple[int, int]:
    """(status, calls sent upstream)."""
    sessions = SessionRegistry()
    sessions.open("s", "sk-1")
    upstream = FakeUpstream()
    options = UpstreamOptions(model="m", remote_images=remote)
    gateway = Gateway(upstream=upstream, options=options, sessions=sessions, capture=None)  # type: ignore[arg-type]
    path, body = body_for(api, url)
    headers = {"x-api-key": "sk-1", "x-goog-api-key": "sk-1", "authorization": "Bearer sk-1"}
    reply = asyncio.run(gateway.handle(Request("POST", path, path, "", headers, orjson.dumps(body), True)))
    return reply.status, len(upstream.bodies)


APIS = ["anthropic_messages", "openai_chat", "openai_responses", "google_genai"]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("url", LOCAL)
def test_local_and_non_http_image_urls_are_refused(api: str, url: str) -> None:
    assert call(api, url) == (400, 0)
    assert call(api, url, remote=True) == (400, 0)


@pytest.mark.parametrize("api", APIS)
def test_remote_images_are_off_by_default_and_data_urls_always_pass(api: str) -> None:
    assert call(api, "https://example.com/cat.png") == (400, 0)
    assert call(api, "https://example.com/cat.png", remote=True) == (200, 1)
    if api != "google_genai":  # Gemini's inline images are inlineData, not a URL
        assert call(api, DATA) == (200, 1)
