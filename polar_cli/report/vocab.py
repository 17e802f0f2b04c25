"""Token ids to text for the viewer, with the run's tokenizer when it is on this machine already: never a download.

The recipe (run.json) names the tokenizer: a directory, or a built-in name (`inference.tokenizers.BUILTIN`) whose
cached copy counts only when complete. Anything else (no tokenizer, none cached, one that fails to load) means the
viewer shows ids, and the report says why.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

log = logging.getLogger("polar.report")


def tokenizer_dir(run: dict[str, Any]) -> tuple[Path | None, str]:
    """The run's tokenizer directory if it is here, else None and why not."""
    engine = ((run.get("recipe") or {}).get("engine")) or {}
    name = engine.get("tokenizer") or engine.get("model_path")
    if not name:
        return None, "the recipe names no tokenizer"
    from polar_cli.inference.tokenizers import BUILTIN, _complete, cache_dir

    name = str(name)
    if name in BUILTIN:
        dest = cache_dir() / "tokenizers" / name
        return (dest, name) if _complete(dest, BUILTIN[name][1]) else (None, f"tokenizer {name} is not cached here")
    path = Path(name)
    return (path, name) if (path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file() else (
        None, f"tokenizer {name} is not on this machine")  # fmt: skip


class Decoder:
    """id -> the text of that one token, cached; `table` is what the viewer pages load."""

    def __init__(self, directory: Path | None, why: str) -> None:
        self.name = why
        self.tokenizer: Any = None
        self.pieces: dict[int, str] = {}
        if directory is None:
            return
        try:
            if (directory / "tokenizer.json").is_file():  # the fast library alone: a second, not transformers' ten
                from tokenizers import Tokenizer

                self.tokenizer = Tokenizer.from_file(str(directory / "tokenizer.json"))
            else:
                from transformers import AutoTokenizer

                self.tokenizer = AutoTokenizer.from_pretrained(str(directory))
        except Exception as exc:  # a broken or foreign tokenizer directory: ids, and the reason in the page
            log.warning("report: tokenizer %s not loaded: %s", directory, exc)
            self.name = f"tokenizer {why} did not load ({type(exc).__name__})"

    @property
    def available(self) -> bool:
        return self.tokenizer is not None

    def add(self, ids: Iterable[int]) -> None:
        if self.tokenizer is None:
            return
        pieces = self.pieces
        new = sorted(i for i in set(ids) if i not in pieces)
        if not new:
            return
        tok = self.tokenizer
        size = tok.get_vocab_size() if hasattr(tok, "get_vocab_size") else len(tok)
        valid = [i for i in new if 0 <= i < size]
        decode = tok.decode_batch if hasattr(tok, "decode_batch") else tok.batch_decode
        texts = decode([[i] for i in valid], skip_special_tokens=False)
        self.pieces.update(zip(valid, texts, strict=True))

    def table(self) -> dict[str, str]:
        return {str(i): t for i, t in self.pieces.items()}
