"""A conversation no rule can make the template take (`normalize.unfit`) is answered by the gateway, not the server.

Ministral 3 demands assistant text between tool results and a user message (`needs_answer_before_user`): the harness
gets a 400 in its own API's error shape naming that trait, the capture record says why (a client_error whose kind
names the trait), and the SGLang double behind the gateway, which renders the real template, sees no call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from polar_cli.capture import read_session
from polar_cli.capture.store import session_file
from polar_cli.templates import detect_traits
from tests.support import templates
from tests.support.gateway import running_gateway
from tests.support.sglang_double import Reply, SGLangDouble

TEMPLATE = "ministral-3"
OPENAI_TOOL = {"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}
CALL = {"name": "ls", "arguments": "{}"}
# tool results, then the harness's next user message with no assistant words between (Codex's and Claude Code's
# interrupt-and-redirect shape)
OPENAI = {
    "model": "m",
    "tools": [OPENAI_TOOL],
    "messages": [
        {"role": "user", "content": "List /tmp."},
        {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": CALL}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
        {"role": "user", "content": "Now list /var."},
    ],
}  # fmt: skip
ANTHROPIC = {
    "model": "m",
    "max_tokens": 64,
    "tools": [{"name": "ls", "input_schema": {"type": "object", "properties": {}}}],
    "messages": [
        {"role": "user", "content": "List /tmp."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "ls", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a.py"},
                                     {"type": "text", "text": "Now list /var."}]},
    ],
}  # fmt: skip


def _error_message(path: str, body: dict[str, Any]) -> str:
    if path == "/v1/messages":
        assert body["type"] == "error"
        assert body["error"]["type"] == "invalid_request_error"
        return str(body["error"]["message"])
    assert body["error"]["type"] == "invalid_request_error"
    return str(body["error"]["message"])


@pytest.mark.parametrize(("path", "body"), [("/v1/chat/completions", OPENAI), ("/v1/messages", ANTHROPIC)])
def test_an_unfit_conversation_is_a_400_naming_the_trait(tmp_path: Path, path: str, body: dict[str, Any]) -> None:
    traits = detect_traits(templates.template(TEMPLATE))
    assert traits.needs_answer_before_user
    with (
        SGLangDouble([Reply("never sent")], template=TEMPLATE) as up,
        running_gateway(up.url, tmp_path, model="m", traits=traits) as gw,
    ):
        key = gw.open_session("s")
        headers = {"authorization": f"Bearer {key}", "x-api-key": key}
        resp = httpx.post(gw.url + path, json=body, headers=headers, timeout=30)
        gw.flush()
    assert resp.status_code == 400, resp.text
    message = _error_message(path, resp.json())
    assert "needs_answer_before_user" in message
    assert "messages[3]" in message
    assert up.chat_requests == []  # never forwarded for the server to refuse
    (record,) = read_session(session_file(tmp_path, "s"))
    assert (record.status, record.error_kind) == ("client_error", "template:needs_answer_before_user")
    assert record.error == message
    assert record.normalized is not None  # what would have been sent, after the rules that did apply
    assert record.normalized["messages"][-2:][0]["role"] == "tool"
