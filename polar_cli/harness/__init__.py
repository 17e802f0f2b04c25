"""Harness adapters: what to write and run so an unmodified harness talks to Polar's gateway (see README.md)."""

from __future__ import annotations

from polar_cli.errors import ConfigError
from polar_cli.harness import claude_code, codex, gemini_cli, pi, qwen_code
from polar_cli.harness.base import HarnessAdapter, Launch, Wiring

ADAPTERS: dict[str, HarnessAdapter] = {
    a.name: a for a in (claude_code.ADAPTER, codex.ADAPTER, qwen_code.ADAPTER, gemini_cli.ADAPTER, pi.ADAPTER)
}
# the names people type
ALIASES = {"claude": "claude-code", "qwen": "qwen-code", "gemini": "gemini-cli", "pi-coding-agent": "pi"}


def get_adapter(name: str) -> HarnessAdapter:
    """The adapter for a harness name or alias; ConfigError naming the known ones otherwise."""
    adapter = ADAPTERS.get(ALIASES.get(name, name))
    if adapter is None:
        raise ConfigError(f"unknown harness {name!r}; known: {', '.join(ADAPTERS)}")
    return adapter


__all__ = ["ADAPTERS", "HarnessAdapter", "Launch", "Wiring", "get_adapter"]
