"""Version strings such as "1.4.2"."""


def parse_version(text):
    """Parse "MAJOR.MINOR.PATCH"; a missing part counts as 0 ("2.1" is 2.1.0)."""
    parts = [int(p) for p in text.strip().split(".")]
    if not 1 <= len(parts) <= 3:
        raise ValueError(f"not a version: {text!r}")
    parts += [0] * (3 - len(parts))
    return parts[0], parts[1], parts[2]
