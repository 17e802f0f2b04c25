"""Durations written as ``1h30m``, ``2d 4h`` or ``45s`` to seconds."""

import re

from timespan.units import SECONDS

_PART = re.compile(r"(\d+)\s*([dhms])")


def parse_duration(text):
    """Number of seconds in ``text``; units are d, h, m and s, case-insensitive.

    Raises ``ValueError`` when ``text`` is not a duration.
    """
    parts = _PART.findall(text.strip().lower())
    if not parts:
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(number) * SECONDS[unit] for number, unit in parts)
