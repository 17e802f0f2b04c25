import pytest
from csvsift import paginate


def test_first_page():
    page = paginate(list(range(40)), page=1, per_page=20)
    assert page.items == list(range(20))
    assert (page.number, page.pages, page.total) == (1, 2, 40)
    assert page.has_next and not page.has_previous


def test_last_full_page():
    page = paginate(list(range(40)), page=2, per_page=20)
    assert page.items == list(range(20, 40))
    assert not page.has_next


def test_partial_last_page():
    page = paginate(list(range(45)), page=3, per_page=20)
    assert page.items == list(range(40, 45))
    assert (page.number, page.pages, page.total) == (3, 3, 45)
    assert page.has_previous and not page.has_next


def test_partial_page_counts_in_has_next():
    assert paginate(list(range(45)), page=2, per_page=20).has_next


def test_fewer_items_than_one_page():
    assert paginate([1, 2, 3], page=1, per_page=20).pages == 1


def test_empty_list_has_one_page():
    page = paginate([], page=1)
    assert (page.items, page.pages) == ([], 1)


@pytest.mark.parametrize("page", [0, 3, -1])
def test_page_out_of_range(page):
    with pytest.raises(IndexError):
        paginate(list(range(40)), page=page, per_page=20)


def test_per_page_must_be_positive():
    with pytest.raises(ValueError):
        paginate([1], per_page=0)
