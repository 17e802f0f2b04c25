"""Trajectories: capture records in, trainable traces out (per_request, prefix_merging), plus the SFT messages view."""

from polar_cli.trajectory.per_request import per_request
from polar_cli.trajectory.prefix_merging import Drift, detect_eot_token_id, prefix_merging
from polar_cli.trajectory.stats import Build, MergeStats, Skip, Split
from polar_cli.trajectory.strategy import build_traces
from polar_cli.trajectory.trace import Trace

__all__ = [
    "Build",
    "Drift",
    "MergeStats",
    "Skip",
    "Split",
    "Trace",
    "build_traces",
    "detect_eot_token_id",
    "per_request",
    "prefix_merging",
]
