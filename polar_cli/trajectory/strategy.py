"""One session's records made into traces by a named strategy: what `polar generate`, `polar serve` and
`polar merge-traces` each choose by their own setting."""

from __future__ import annotations

from collections.abc import Sequence

from polar_cli.capture import CaptureRecord
from polar_cli.trajectory.per_request import per_request
from polar_cli.trajectory.prefix_merging import Drift, prefix_merging
from polar_cli.trajectory.stats import Build


def build_traces(
    records: Sequence[CaptureRecord], strategy: str, eot_token_id: int | None = None, drift: Drift = "tolerant"
) -> Build:
    """Each call a trace of its own (``per_request``), or calls merged along their shared prefixes (else)."""
    if strategy == "per_request":
        return per_request(records)
    return prefix_merging(records, eot_token_id, drift=drift)
