"""Prices of orders."""

TAX_RATE = 0.2


def order_total(lines, tax=True):
    """The total of ``lines`` (pairs of unit price and quantity), with tax unless told not."""
    net = sum(price * qty for price, qty in lines)
    return round(net * (1 + TAX_RATE) if tax else net, 2)
