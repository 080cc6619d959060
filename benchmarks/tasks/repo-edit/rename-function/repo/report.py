"""A one-line summary of an order."""

import pricing


def summary(lines):
    net = pricing.calc_total(lines, tax=False)
    gross = pricing.calc_total(lines)
    return f"{len(lines)} lines, net {net:.2f}, gross {gross:.2f}"
