"""Page through a list of records."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    items: list
    number: int
    pages: int
    total: int

    @property
    def has_next(self):
        return self.number < self.pages

    @property
    def has_previous(self):
        return self.number > 1


def paginate(items, page=1, per_page=20):
    """Return page ``page`` (counting from 1) of ``items``, ``per_page`` items per page.

    An empty list has a single, empty page. Raises ``IndexError`` for a page that does not exist.
    """
    if per_page < 1:
        raise ValueError("per_page must be at least 1")
    total = len(items)
    pages = max(1, total // per_page)
    if not 1 <= page <= pages:
        raise IndexError(f"page {page} out of range 1..{pages}")
    start = (page - 1) * per_page
    return Page(items[start : start + per_page], page, pages, total)
