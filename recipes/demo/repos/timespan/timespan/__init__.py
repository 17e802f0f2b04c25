"""Parse and format human-written durations such as ``1h30m``."""

from timespan.format import format_duration
from timespan.parse import parse_duration

__all__ = ["format_duration", "parse_duration"]
__version__ = "0.8.0"
