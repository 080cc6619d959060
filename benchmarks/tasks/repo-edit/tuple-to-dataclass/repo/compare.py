"""Compare and describe versions."""

from versions import parse_version


def is_newer(a, b):
    """Whether version ``a`` is newer than version ``b``."""
    va, vb = parse_version(a), parse_version(b)
    return (va[0], va[1], va[2]) > (vb[0], vb[1], vb[2])


def describe(text):
    v = parse_version(text)
    return f"{v[0]}.{v[1]}.{v[2]} (major {v[0]})"


def bump_minor(text):
    major, minor, _ = parse_version(text)
    return f"{major}.{minor + 1}.0"
