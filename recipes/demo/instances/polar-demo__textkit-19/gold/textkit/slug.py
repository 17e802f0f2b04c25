"""URL slugs from free-form titles."""

import re

_NON_WORD = re.compile(r"[^a-z0-9]+")


def slugify(text, sep="-", max_length=None):
    """Lower-case ``text`` and join its words with ``sep``.

    Anything that is not a letter or a digit separates words. ``max_length`` caps the
    length of the result.

    >>> slugify("Hello, World!")
    'hello-world'
    """
    slug = _NON_WORD.sub(sep, text.lower()).strip(sep)
    if max_length is not None:
        slug = slug[:max_length].rstrip(sep)
    return slug
