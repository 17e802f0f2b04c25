"""Small text helpers for titles, URLs and previews."""

from textkit.slug import slugify
from textkit.truncate import truncate

__all__ = ["slugify", "truncate"]
__version__ = "0.3.1"
