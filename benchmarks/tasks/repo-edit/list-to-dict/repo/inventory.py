"""Stock of a small shop."""


class Inventory:
    def __init__(self):
        self.items = []

    def add(self, name, qty=1):
        self.items.append((name, qty))

    def quantity(self, name):
        for item, qty in self.items:
            if item == name:
                return qty
        return 0

    def remove(self, name, qty=1):
        for i, (item, have) in enumerate(self.items):
            if item == name:
                if have < qty:
                    raise ValueError(f"only {have} {name} in stock")
                self.items[i] = (item, have - qty)
                return
        raise ValueError(f"no {name} in stock")

    def total(self):
        return sum(qty for _, qty in self.items)
