"""Summary statistics over a column of numbers."""


def mean(values):
    """Arithmetic mean of the non-empty sequence ``values``."""
    if not values:
        raise ValueError("mean of empty data")
    return sum(values) / len(values)


def median(values):
    """Median of the non-empty sequence ``values`` (which need not be sorted)."""
    if not values:
        raise ValueError("median of empty data")
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
