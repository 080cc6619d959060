"""Print the stock."""


def stock_lines(inventory):
    """One "name: quantity" line per item, sorted by name."""
    return [f"{name}: {qty}" for name, qty in sorted(inventory.items)]
