"""Harness adapters: what to write and run so an unmodified harness talks to Polar's gateway (see README.md)."""

from __future__ import annotations

from polar_cli.errors import ConfigError
from polar_cli.harness import (
    aider,
    claude_code,
    cline,
    codex,
    gemini_cli,
    hermes,
    kilo,
    mini_swe_agent,
    openclaw,
    opencode,
    openhands,
    pi,
    qwen_code,
    terminus2,
)
from polar_cli.harness.base import HarnessAdapter, Launch, Wiring

ADAPTERS: dict[str, HarnessAdapter] = {
    a.name: a for a in (claude_code.ADAPTER, codex.ADAPTER, qwen_code.ADAPTER, gemini_cli.ADAPTER, pi.ADAPTER)
}
ADAPTERS.update({a.name: a for a in (mini_swe_agent.ADAPTER, aider.ADAPTER, hermes.ADAPTER)})
ADAPTERS.update({a.name: a for a in (opencode.ADAPTER, cline.ADAPTER, openhands.ADAPTER)})
ADAPTERS.update({a.name: a for a in (openclaw.ADAPTER, kilo.ADAPTER, terminus2.ADAPTER)})
# the names people type
ALIASES = {
    "claude": "claude-code",
    "qwen": "qwen-code",
    "gemini": "gemini-cli",
    "pi-coding-agent": "pi",
    "mini": "mini-swe-agent",
    "aider-chat": "aider",
    "hermes-agent": "hermes",
    "opencode-ai": "opencode",
    "openhands-sdk": "openhands",
    "openhands-tools": "openhands",
    "kilocode": "kilo",
    "@kilocode/cli": "kilo",
    "terminus2": "terminus-2",
    "terminus": "terminus-2",
}


def get_adapter(name: str) -> HarnessAdapter:
    """The adapter for a harness name or alias; ConfigError naming the known ones otherwise."""
    adapter = ADAPTERS.get(ALIASES.get(name, name))
    if adapter is None:
        raise ConfigError(f"unknown harness {name!r}; known: {', '.join(ADAPTERS)}")
    return adapter


__all__ = ["ADAPTERS", "HarnessAdapter", "Launch", "Wiring", "get_adapter"]
