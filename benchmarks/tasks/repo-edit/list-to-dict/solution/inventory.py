"""Stock of a small shop."""


class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, qty=1):
        self.items[name] = self.items.get(name, 0) + qty

    def quantity(self, name):
        return self.items.get(name, 0)

    def remove(self, name, qty=1):
        have = self.items.get(name)
        if have is None:
            raise ValueError(f"no {name} in stock")
        if have < qty:
            raise ValueError(f"only {have} {name} in stock")
        if have == qty:
            del self.items[name]
        else:
            self.items[name] = have - qty

    def total(self):
        return sum(self.items.values())
