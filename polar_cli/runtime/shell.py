"""Shell text that carries bytes into a container unchanged: a heredoc whose delimiter is no line of its body, and
base64 where a harness's shell tool would refuse or alter the plain text (the gold policy's patch, a Harbor task's
files)."""

from __future__ import annotations

import hashlib


def heredoc_delimiter(text: str) -> str:
    """A heredoc delimiter that is no line of ``text`` (derived from its digest, lengthened on the odd clash)."""
    lines = set(text.splitlines())
    digest = hashlib.sha256(text.encode()).hexdigest()
    for size in range(8, len(digest) + 1, 4):
        delimiter = f"POLAR_GOLD_PATCH_{digest[:size]}"
        if delimiter not in lines:
            return delimiter
    raise ValueError("no free heredoc delimiter")  # every digest prefix is a line of the patch: not a real patch


# what some harnesses' shell tools refuse to run even inside a quoted heredoc (Gemini CLI: command substitution)
_SUBSTITUTIONS = ("`", "$(", "<(", ">(")


def needs_encoding(patch: str) -> bool:
    """Whether the patch must travel base64-encoded: it holds substitution syntax or control characters."""
    if any(token in patch for token in _SUBSTITUTIONS):
        return True
    return any(ord(c) < 32 and c not in "\t\n" for c in patch)
