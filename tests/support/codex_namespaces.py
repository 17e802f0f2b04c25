"""A real recorded Codex request with the ``namespace`` tools Codex 0.171 sends for a model name it does not know.

Codex falls back to default model metadata for an unknown name (``qwen3.5-122b-a10b``) and then offers its
multi-agent tools as a namespace group at ``tools[4]``; MCP servers' tools come one namespace per server.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.support.recordings import find_body, recorded

SPAWN_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {"message": {"type": "string"}, "agent_type": {"type": "string"}},
    "required": ["message"],
    "additionalProperties": False,
}
MULTI_AGENT: dict[str, Any] = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "Tools in the multi_agent_v1 namespace.",
    "tools": [
        {"type": "function", "name": "spawn_agent", "description": "Start a sub-agent.", "strict": False,
         "parameters": SPAWN_PARAMS},
        {"type": "function", "name": "wait", "description": "Wait for agents.", "strict": False,
         "parameters": {"type": "object", "properties": {"ids": {"type": "array", "items": {"type": "string"}}}}},
    ],
}  # fmt: skip
MCP_GITHUB: dict[str, Any] = {
    "type": "namespace",
    "name": "mcp__github",
    "description": "GitHub MCP server.",
    "tools": [
        {"type": "function", "name": "get_issue", "description": "Read an issue.", "strict": False,
         "parameters": {"type": "object", "properties": {"number": {"type": "integer"}}}},
        {"type": "custom", "name": "run_query", "description": "Raw GraphQL."},
    ],
}  # fmt: skip
SPAWN_ARGS = '{"message": "list the files"}'


def codex_body(run: str = "codex_tool", seq: int = 4) -> dict[str, Any]:
    """A real Codex request with the namespaces an unknown model name gets: multi_agent_v1 at tools[4], an MCP one."""
    body = copy.deepcopy(find_body(recorded("openai_responses"), "codex", run, seq))
    body["model"] = "qwen3.5-122b-a10b"
    body["tools"][4:4] = [copy.deepcopy(MULTI_AGENT)]
    body["tools"].append(copy.deepcopy(MCP_GITHUB))
    return body
