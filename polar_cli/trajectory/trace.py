"""The Trace: what a builder hands to trainers (docs/design.md "Trace"), with its invariants checked at construction."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import compress
from typing import Any

import orjson

from polar_cli.errors import TraceError


@dataclass(frozen=True, slots=True)
class Trace:
    """One trainable token sequence built from one or more model calls of a session.

    ``prompt_ids`` is never trained on. ``response_ids`` holds what follows it: ids the model sampled
    (``loss_mask`` 1, with their ``response_logprobs``) and, between merged calls, ids the harness and chat template
    added (``loss_mask`` 0, logprob 0.0). ``prompt_messages`` + ``response_messages`` are the same conversation in
    OpenAI chat format and ``tools`` its tool definitions (see `messages`). ``metadata`` carries chain stats.
    """

    session_id: str
    seqs: tuple[int, ...]
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    response_logprobs: list[float]
    prompt_messages: list[dict[str, Any]] = field(default_factory=list)
    response_messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_invariants(self.response_ids, self.loss_mask, self.response_logprobs, where=self._where())

    def _where(self) -> str:
        return f"trace of session {self.session_id!r} calls {list(self.seqs)}"

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.prompt_messages + self.response_messages

    def to_row(self) -> dict[str, Any]:
        """The trace as one corpus row: plain JSON types, one column per field.

        ``tools`` is a JSON string: tool schemas differ in shape from harness to harness, which Arrow would either
        null-fill into one giant struct or refuse; TRL's SFTTrainer accepts the JSON-string form.
        """
        return {
            "session_id": self.session_id,
            "seqs": list(self.seqs),
            "messages": self.messages,
            "tools": orjson.dumps(self.tools).decode(),
            "prompt_ids": self.prompt_ids,
            "response_ids": self.response_ids,
            "loss_mask": self.loss_mask,
            "response_logprobs": self.response_logprobs,
            "finish_reason": self.finish_reason,
            "metadata": self.metadata,
        }


def check_invariants(response_ids: list[int], loss_mask: list[int], logprobs: list[float], *, where: str) -> None:
    """Raise `TraceError` unless the three arrays line up, masks are 0/1 and every trainable slot has a logprob.

    Runs once per trace over whole arrays, so the checks stay at C speed (set, sum, compress) instead of a Python loop.
    """
    n = len(response_ids)
    if len(loss_mask) != n or len(logprobs) != n:
        raise TraceError(
            f"{where}: response_ids has {n} ids but loss_mask has {len(loss_mask)} and "
            f"response_logprobs {len(logprobs)}"
        )
    if not set(loss_mask) <= {0, 1}:
        raise TraceError(f"{where}: loss_mask holds values other than 0 and 1: {sorted(set(loss_mask) - {0, 1})}")
    try:
        total = sum(compress(logprobs, loss_mask), 0.0)
    except TypeError as exc:
        raise TraceError(f"{where}: a trainable slot has no numeric logprob") from exc
    if math.isnan(total):
        raise TraceError(f"{where}: a trainable slot has a NaN logprob")
