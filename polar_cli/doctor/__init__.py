"""`polar doctor`: what is installed, reachable and missing for a run, one `Check` per line; and `preflight`, the
failures that must stop `polar generate` before it starts anything."""

from polar_cli.doctor.checks import DEFAULT_MIN_FREE_GB, Check
from polar_cli.doctor.report import diagnose, preflight

__all__ = ["DEFAULT_MIN_FREE_GB", "Check", "diagnose", "preflight"]
