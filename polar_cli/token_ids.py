"""Token ids as Polar stores and trains on them: 4-byte ints, so below 2**31 (vocabulary indices, never negative)."""

from __future__ import annotations

import sys
from array import array
from typing import Any

# where the most significant byte of each 4-byte int lies in native order
_HIGH_BYTE = 3 if sys.byteorder == "little" else 0


def id_bytes(ids: list[Any]) -> bytes | None:
    """``ids`` as native 4-byte ints when every one is an int in ``[0, 2**31)``, else None.

    One C-speed conversion as unsigned ints (it refuses a float, None, a string, a negative int or one past 2**32),
    then every high byte below 0x80 proves each is below 2**31: those bytes are the signed conversion's too. A bool
    converts as 0 or 1: a caller that must refuse bools checks their type itself."""
    try:
        data = array("I", ids).tobytes()
    except (TypeError, OverflowError):
        return None
    return data if data[_HIGH_BYTE::4].isascii() else None
