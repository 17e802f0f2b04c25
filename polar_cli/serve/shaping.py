"""What a trainer asks of a session's result beyond the training-safety rules (`results`): pure functions over one
SessionResult, applied once, before it is journaled (so a restart serves the same rows).

- Rule 1 (masked reward): a masked session's ``reward`` is ``None``, "no reward": TRL leaves such a row out of the
  group's mean and std and gives it advantage 0, where a 0.0 would teach. ``masked_reward: zero`` (task
  ``trainer.masked_reward``, else ``service.masked_reward``) writes 0.0 for trainers that want a number.
- Rule 2 (versions): weight versions are ordered by their trailing integer ("step-10" after "step-9"), then by
  name; a version without one sorts first. A session that saw more than one is ``off_policy`` and lists every one;
  ``trainer.on_policy_only`` masks it (``masked_reason: off_policy``).
- Rule 3 (one row per sample): ``trainer.rows: main`` keeps one trace, the main one (`main_trace`), with ``env_mask``
  (TRL's name for ``loss_mask``: 1 on sampled tokens, 0 on the tool and environment tokens merged into it) and says
  how many traces were dropped; ``all`` (the default) keeps every trace.
- Rule 4 (logprob mode): every trace says what its ``response_logprobs`` are (``logprobs_mode``: vLLM's
  ``raw_logprobs`` are before temperature and top-p/k, ``processed_logprobs`` after; None: not known).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

TRAILING_INT = re.compile(r"(\d+)$")
# lineage kinds that are not the agent's own line of work (`trajectory.lineage`)
ASIDE = frozenset({"side", "subagent", "summary"})


def version_key(version: str) -> tuple[int, str]:
    """Sort key of a weight version: its trailing integer, then its name (-1 when it has none)."""
    m = TRAILING_INT.search(version)
    return (int(m.group(1)) if m else -1, version)


def ordered_versions(versions: Iterable[str]) -> list[str]:
    return sorted(set(versions), key=version_key)


def weight_step(version: str | None) -> int | None:
    """A version's trailing integer (None: no version, or none in it)."""
    if version is None:
        return None
    m = TRAILING_INT.search(version)
    return int(m.group(1)) if m else None


def main_trace(traces: list[dict[str, Any]]) -> int | None:
    """The index of the sample's main trace: of the traces on the agent's own line (not side calls, sub-agents or
    summaries, unless there is nothing else), the one with the most trained tokens, the later on a tie."""
    if not traces:
        return None
    own = [i for i, t in enumerate(traces) if (t.get("lineage") or {}).get("kind") not in ASIDE] or list(
        range(len(traces))
    )
    return max(own, key=lambda i: (sum(traces[i].get("loss_mask") or ()), i))


def _mask(trace: Mapping[str, Any]) -> dict[str, Any]:
    return {**trace, "loss_mask": [0] * len(trace.get("response_ids") or ())}


def shape(
    result: dict[str, Any],
    options: Mapping[str, Any] | None,
    *,
    masked_reward: str = "null",
    logprobs_mode: str | None = None,
) -> dict[str, Any]:
    """The SessionResult as the trainer asked for it (Rules 1-4); ``options`` is the task's ``trainer`` section."""
    options = options or {}
    out = dict(result)
    versions = ordered_versions(out.get("weight_versions") or ())
    out["weight_versions"] = versions
    out["off_policy"] = len(versions) > 1
    out["weight_step_min"] = weight_step(versions[0]) if versions else None
    out["weight_step_max"] = weight_step(versions[-1]) if versions else None
    traces = [dict(t) for t in out.get("traces") or ()]
    for t in traces:
        t["weight_versions"] = ordered_versions(t.get("weight_versions") or ())
        t["logprobs_mode"] = logprobs_mode
    out.setdefault("masked_reason", None)
    if options.get("on_policy_only") and out["off_policy"] and not out.get("masked"):
        out["masked"], out["masked_reason"] = True, "off_policy"
        out["reason"] = f"off_policy: saw weight versions {', '.join(versions)}"
        traces = [_mask(t) for t in traces]
    elif out.get("masked") and out["masked_reason"] is None:
        out["masked_reason"] = out.get("status")
    if out.get("masked"):
        zero = (options.get("masked_reward") or masked_reward) == "zero"
        out["reward"] = 0.0 if zero else None
    out["dropped_traces"] = 0
    if options.get("rows") == "main":
        keep = main_trace(traces)
        out["dropped_traces"] = len(traces) - (keep is not None)
        traces = [] if keep is None else [{**traces[keep], "env_mask": list(traces[keep].get("loss_mask") or ())}]
    out["traces"] = traces
    return out
