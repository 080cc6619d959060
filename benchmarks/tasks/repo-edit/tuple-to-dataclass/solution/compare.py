"""Compare and describe versions."""

from versions import parse_version


def is_newer(a, b):
    """Whether version ``a`` is newer than version ``b``."""
    va, vb = parse_version(a), parse_version(b)
    return (va.major, va.minor, va.patch) > (vb.major, vb.minor, vb.patch)


def describe(text):
    v = parse_version(text)
    return f"{v.major}.{v.minor}.{v.patch} (major {v.major})"


def bump_minor(text):
    v = parse_version(text)
    return f"{v.major}.{v.minor + 1}.0"
