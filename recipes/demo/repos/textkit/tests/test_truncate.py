import pytest
from textkit import truncate


def test_short_text_unchanged():
    assert truncate("short", 10) == "short"


def test_exact_width_unchanged():
    assert truncate("exact", 5) == "exact"


def test_cut_with_placeholder():
    assert truncate("The quick brown fox", 10) == "The qui..."


def test_custom_placeholder():
    assert truncate("The quick brown fox", 10, placeholder="\u2026") == "The quick\u2026"


def test_negative_width_rejected():
    with pytest.raises(ValueError):
        truncate("text", -1)
