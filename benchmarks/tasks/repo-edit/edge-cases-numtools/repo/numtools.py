"""Small numeric helpers."""


def digit_sum(n):
    """The sum of the decimal digits of the integer ``n``."""
    return sum(int(d) for d in str(n))


def mean(values):
    """The arithmetic mean of ``values``."""
    return sum(values) / len(values)


def largest(values):
    """The largest of ``values``."""
    best = values[0]
    for v in values[1:]:
        if v > best:
            best = v
    return best
