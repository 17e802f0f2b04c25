"""Chat templates and vocabularies: what the model saw, rendered and tokenised as its server does (README.md)."""

from polar_cli.templates.chat import ChatTemplate, TemplateError, sglang_tools, template_message
from polar_cli.templates.normalize import Unfit, make_template_safe, unfit
from polar_cli.templates.traits import TemplateTraits, detect_traits
from polar_cli.templates.vocab import HFVocab, TiktokenVocab, Vocab, qwen3_5_vocab, with_tokens

__all__ = [
    "ChatTemplate",
    "HFVocab",
    "TemplateError",
    "TemplateTraits",
    "TiktokenVocab",
    "Unfit",
    "Vocab",
    "detect_traits",
    "make_template_safe",
    "qwen3_5_vocab",
    "sglang_tools",
    "template_message",
    "unfit",
    "with_tokens",
]
