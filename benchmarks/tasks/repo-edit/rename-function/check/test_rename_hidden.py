from pathlib import Path

import cart
import pricing
import report


def test_new_name_works():
    assert pricing.order_total([(10.0, 2), (5.0, 1)]) == 30.0
    assert pricing.order_total([(10.0, 2)], tax=False) == 20.0


def test_old_name_is_gone():
    assert not hasattr(pricing, "calc_total")
    for path in Path(".").glob("*.py"):
        if not path.name.startswith("test_"):
            assert "calc_total" not in path.read_text(), path.name


def test_callers_still_work():
    c = cart.Cart()
    c.add(10.0, 2)
    c.add(2.5)
    assert c.total() == 27.0
    assert report.summary([(10.0, 1)]) == "1 lines, net 10.00, gross 12.00"
