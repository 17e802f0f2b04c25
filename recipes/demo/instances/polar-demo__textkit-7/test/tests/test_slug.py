import pytest
from textkit import slugify


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Hello World", "hello-world"),
        ("  Leading and trailing  ", "leading-and-trailing"),
        ("[draft] Release notes (v2)", "draft-release-notes-v2"),
        ("already-a-slug", "already-a-slug"),
    ],
)
def test_slugify_examples(title, expected):
    assert slugify(title) == expected


def test_custom_separator():
    assert slugify("Hello World", sep="_") == "hello_world"


def test_max_length_cuts():
    assert slugify("abcdefghij", max_length=4) == "abcd"


def test_nothing_left():
    assert slugify("!!!") == ""


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Crème brûlée", "creme-brulee"),
        ("Ärger im Büro", "arger-im-buro"),
        ("naïve café", "naive-cafe"),
    ],
)
def test_slugify_transliterates_accents(title, expected):
    assert slugify(title) == expected
