"""Previews of long text."""


def truncate(text, width, placeholder="..."):
    """Shorten ``text`` to at most ``width`` characters.

    When ``text`` is cut, ``placeholder`` marks the cut and counts towards ``width``.

    >>> truncate("The quick brown fox", 10)
    'The qui...'
    """
    if width < 0:
        raise ValueError("width must not be negative")
    if len(text) <= width:
        return text
    return text[: width - len(placeholder)] + placeholder
