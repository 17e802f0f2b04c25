"""Duration units, largest first."""

UNITS = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
SECONDS = dict(UNITS)
