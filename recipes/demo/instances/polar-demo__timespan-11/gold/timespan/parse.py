"""Durations written as ``1h30m``, ``2d 4h`` or ``45s`` to seconds."""

import re

from timespan.units import SECONDS

_PART = re.compile(r"(\d+)\s*([dhms])")
# the whole text must be made of parts: findall alone skips over anything between them
_DURATION = re.compile(r"(?:\s*\d+\s*[dhms])+\s*")


def parse_duration(text):
    """Number of seconds in ``text``; units are d, h, m and s, case-insensitive.

    Raises ``ValueError`` when ``text`` is not a duration.
    """
    text_lower = text.strip().lower()
    if not _DURATION.fullmatch(text_lower):
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(number) * SECONDS[unit] for number, unit in _PART.findall(text_lower))
