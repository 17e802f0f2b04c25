"""Synthetic capture records for trajectory tests.

Ids: E=2 ends a turn, A=3 opens an assistant turn, T=5 opens a tool result; sampled ids are >= 20 in exact tests and
>= 1000 in generated sessions. A sampled id's logprob is -id/1000, so expected logprob arrays follow from the ids.
"""

from __future__ import annotations

from typing import Any

from polar_cli.capture import CaptureRecord

E, A, T = 2, 3, 5


def lp(ids: list[int]) -> list[float]:
    return [-i / 1000 for i in ids]


def call(
    seq: int,
    prompt: list[int],
    sampled: list[int],
    *,
    finish: str | None = None,
    status: str = "ok",
    session: str = "s1",
    messages: list[dict[str, Any]] | None = None,
    reply: dict[str, Any] | None = None,
    tools: list[dict[str, Any]] | None = None,
    stop: list[str] | None = None,
) -> CaptureRecord:
    if finish is None:
        finish = "stop" if sampled and sampled[-1] == E else "length"
    normalized: dict[str, Any] = {
        "model": "m",
        "messages": messages if messages is not None else [{"role": "user", "content": f"call {seq}"}],
    }
    if tools is not None:
        normalized["tools"] = tools
    if stop is not None:
        normalized["stop"] = stop
    message = reply if reply is not None else {"role": "assistant", "content": f"answer {seq}"}
    ok = status == "ok"
    return CaptureRecord(
        session_id=session,
        seq=seq,
        api="openai_chat",
        path="/v1/chat/completions",
        started=float(seq),
        ended=float(seq) + 0.5,
        status=status,  # type: ignore[arg-type]
        request={"messages": normalized["messages"]},
        normalized=normalized,
        response={"choices": [{"index": 0, "message": message, "finish_reason": finish}]} if ok else None,
        prompt_ids=prompt,
        response_ids=sampled,
        response_logprobs=lp(sampled),
        finish_reason=finish if ok else None,
        error=None if ok else "upstream said no",
    )


def failed(seq: int, *, session: str = "s1") -> CaptureRecord:
    return call(seq, [], [], status="upstream_error", session=session)


def mask_of(parts: list[tuple[list[int], int]]) -> tuple[list[int], list[int], list[float]]:
    """response_ids, loss_mask, logprobs for a list of (ids, mask) runs."""
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for run, m in parts:
        ids += run
        mask += [m] * len(run)
        logprobs += lp(run) if m else [0.0] * len(run)
    return ids, mask, logprobs
