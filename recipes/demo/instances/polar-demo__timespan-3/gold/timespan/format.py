"""Seconds to compact durations such as ``1h 30m``."""

from timespan.units import UNITS


def format_duration(seconds):
    """Render a whole number of ``seconds``: ``5400`` -> ``"1h 30m"``, ``0`` -> ``"0s"``."""
    if seconds == 0:
        return "0s"
    parts = []
    remaining = seconds
    for unit, size in UNITS[:-1]:
        if remaining >= size:
            count, remaining = divmod(remaining, size)
            parts.append(f"{count}{unit}")
    if remaining:
        parts.append(f"{remaining}s")
    return " ".join(parts)
