import pytest
from timespan import format_duration


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (45, "45s"),
        (5400, "1h 30m"),
        (93784, "1d 2h 3m 4s"),
    ],
)
def test_format(seconds, text):
    assert format_duration(seconds) == text


def test_round_trip():
    from timespan import parse_duration

    assert parse_duration(format_duration(7384)) == 7384
