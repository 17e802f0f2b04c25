"""The Trace: what a builder hands to trainers (docs/design.md "Trace"), with its invariants checked at construction."""

from __future__ import annotations

import copy
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
        check_ids(self.prompt_ids, "prompt_ids", where=self._where())

    def with_metadata(self, metadata: dict[str, Any]) -> Trace:
        """This trace with other ``metadata``. The id arrays are this trace's, checked when it was built, so they are
        not checked again (`dataclasses.replace` would: a second pass over every id of the session)."""
        trace = copy.copy(self)
        object.__setattr__(trace, "metadata", metadata)
        return trace

    def _where(self) -> str:
        return f"trace of session {self.session_id!r} calls {list(self.seqs)}"

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.prompt_messages + self.response_messages

    @property
    def sft_messages(self) -> list[dict[str, Any]]:
        """`messages` for SFT: an assistant message of the prompt was sampled in another trace (an earlier call of a
        conversation this one continues, or the turns a compaction kept), so it carries ``"weight": 0`` (OpenAI's
        fine-tuning convention, read by axolotl and others) and is trained there, not here. No ``weight`` means 1:
        each sampled answer is trained in exactly one trace, the one whose context it was sampled in."""
        resent = [{**m, "weight": 0} if m.get("role") == "assistant" else m for m in self.prompt_messages]
        return resent + self.response_messages

    def to_row(self) -> dict[str, Any]:
        """The trace as one corpus row: plain JSON types, one column per field.

        ``tools`` is a JSON string: tool schemas differ in shape from harness to harness, which Arrow would either
        null-fill into one giant struct or refuse; TRL's SFTTrainer accepts the JSON-string form.
        """
        return {
            "session_id": self.session_id,
            "seqs": list(self.seqs),
            "messages": self.sft_messages,
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
    check_ids(response_ids, "response_ids", where=where)
    if not set(loss_mask) <= {0, 1}:
        raise TraceError(f"{where}: loss_mask holds values other than 0 and 1: {sorted(set(loss_mask) - {0, 1})}")
    try:
        total = sum(compress(logprobs, loss_mask), 0.0)
    except TypeError as exc:
        raise TraceError(f"{where}: a trainable slot has no numeric logprob") from exc
    if math.isnan(total):
        raise TraceError(f"{where}: a trainable slot has a NaN logprob")


def check_ids(ids: list[int], name: str, *, where: str) -> None:
    """Raise `TraceError` unless every id is an int (bool excluded): one C-speed pass over the element types."""
    kinds = set(map(type, ids)) - {int}
    if kinds:
        raise TraceError(f"{where}: {name} holds {', '.join(sorted(k.__name__ for k in kinds))} values, not only ints")
