"""Split a list into pages for display."""


def page(items, number, size=10):
    """Return page ``number`` (1-based) of ``items``, ``size`` items per page.

    A page past the end is an empty list.
    """
    if number < 1 or size < 1:
        raise ValueError("page number and size must be at least 1")
    start = (number - 1) * size
    return items[start:start + size]


def page_count(items, size=10):
    """How many pages ``items`` fill (0 for no items)."""
    return (len(items) + size - 1) // size
