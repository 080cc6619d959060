"""Text helpers for building URLs."""

import re


def slugify(text, max_length=50):
    """Turn ``text`` into a URL slug.

    - letters are lower-cased; only ASCII letters and digits are kept,
    - every run of other characters (spaces, punctuation) becomes a single "-",
    - there is no "-" at the start or the end,
    - the slug is at most ``max_length`` characters; when it has to be cut, it is cut
      and any "-" left at its end is removed,
    - text with no letters or digits gives "".

    >>> slugify("Hello, World!")
    'hello-world'
    """
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:max_length].rstrip("-")


def title_slug(title, year):
    """A slug for an article: its year, then the title's slug."""
    return f"{year}-{slugify(title)}"
