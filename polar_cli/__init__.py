"""Polar: run coding-agent harnesses unmodified behind a token-capturing gateway."""

__version__ = "0.1.0"
