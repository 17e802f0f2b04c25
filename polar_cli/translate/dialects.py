"""What differs between the inference servers Polar calls, in one small object per token-field dialect.

Every server answers the same OpenAI Chat Completions request; they differ in how they are asked for token ids, in
whether a request can carry a client-chosen id (``rid``) that `/abort_request` cancels, and in what the start-up probe
must try (docs/upstream.md "Token fields", "Abort", "The start-up probe"). Nothing else in Polar names a server
release: it asks its `Dialect`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from polar_cli.errors import ConfigError

DialectName = Literal["sglang", "sglang-legacy", "vllm"]
# where a chat call carries exact prompt token ids in token-in mode (polar_cli/translate/token_in.py)
TokenInField = Literal["input_ids", "kv_transfer_params.prompt_token_ids"]


@dataclass(frozen=True, slots=True)
class Dialect:
    name: DialectName
    # the request fields that make this server return prompt and sampled token ids (with logprobs: true)
    token_fields: Mapping[str, Any] = field(hash=False)
    # whether the server takes ``rid`` and can cancel a request by it (SGLang's /abort_request)
    aborts: bool
    # the dialects the start-up probe tries, in order, for a server configured as this one
    probe_order: tuple[DialectName, ...]
    # the chat-route field that makes the server take prompt token ids instead of rendering the messages; None: the
    # dialect has no token-in route known to Polar and every call is rendered by the server
    token_in_field: TokenInField | None = None


SGLANG = Dialect(
    "sglang",
    {"return_token_ids": True},
    aborts=True,
    probe_order=("sglang", "sglang-legacy"),
    token_in_field="input_ids",
)
# SGLang releases before return_token_ids: the ids come back through meta_info
SGLANG_LEGACY = Dialect(
    "sglang-legacy",
    {"return_prompt_token_ids": True, "return_meta_info": True},
    aborts=True,
    probe_order=("sglang-legacy",),
)
VLLM = Dialect(
    "vllm",
    {"return_token_ids": True},
    aborts=False,
    probe_order=("vllm",),
    token_in_field="kv_transfer_params.prompt_token_ids",
)

DIALECTS: Mapping[DialectName, Dialect] = {d.name: d for d in (SGLANG, SGLANG_LEGACY, VLLM)}


def dialect(name: str) -> Dialect:
    """The dialect of that name; a `ConfigError` listing the known ones otherwise."""
    try:
        return DIALECTS[name]  # type: ignore[index]
    except KeyError:
        raise ConfigError(f"unknown dialect {name!r}: one of {', '.join(DIALECTS)}") from None
