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
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
