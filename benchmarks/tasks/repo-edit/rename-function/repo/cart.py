"""A shopping cart."""

from pricing import calc_total


class Cart:
    def __init__(self):
        self.lines = []

    def add(self, price, qty=1):
        self.lines.append((price, qty))

    def total(self):
        return calc_total(self.lines)
