"""Engine control for weight syncs: which servers an engine handle drives, and how far a probe moved. Each server
kind's own routes (load, served version, probe) are its module in `servers` (docs/design.md "Rollout service").

The probe: the log-probabilities the server gives a fixed id sequence (`servers.PROBE_IDS`). New weights must move
them; the same weights must not.
"""

from __future__ import annotations

from collections.abc import Sequence

from polar_cli.inference.engines import EngineHandle


def engine_urls(handle: EngineHandle) -> list[str]:
    """The servers behind ``handle`` (none for a scripted engine)."""
    if handle.scripted is not None:
        return []
    pool = handle.pool
    if pool is not None:
        return pool.urls
    base = getattr(handle.upstream, "base_url", None)
    return [base] if isinstance(base, str) else []


def moved(before: Sequence[float], after: Sequence[float]) -> float:
    """The largest change of any probe log-probability."""
    return max((abs(a - b) for a, b in zip(before, after, strict=True)), default=0.0)
