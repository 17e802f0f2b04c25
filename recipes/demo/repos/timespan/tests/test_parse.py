import pytest
from timespan import parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45s", 45),
        ("1h30m", 5400),
        ("2d 4h", 187200),
        ("1H 30M", 5400),
        (" 10m ", 600),
    ],
)
def test_parse(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "10x"])
def test_not_a_duration(text):
    with pytest.raises(ValueError):
        parse_duration(text)
