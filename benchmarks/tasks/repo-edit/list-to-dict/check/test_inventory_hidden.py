import pytest
from inventory import Inventory
from report import stock_lines


def test_items_is_a_dict_and_adds_merge():
    inv = Inventory()
    inv.add("apple", 2)
    inv.add("apple", 3)
    inv.add("pear")
    assert isinstance(inv.items, dict)
    assert inv.items == {"apple": 5, "pear": 1}
    assert inv.quantity("apple") == 5 and inv.quantity("plum") == 0
    assert inv.total() == 6


def test_remove():
    inv = Inventory()
    inv.add("apple", 5)
    inv.remove("apple", 2)
    assert inv.items == {"apple": 3}
    inv.remove("apple", 3)
    assert inv.items == {}
    with pytest.raises(ValueError):
        inv.remove("apple")


def test_remove_too_many():
    inv = Inventory()
    inv.add("fig", 1)
    with pytest.raises(ValueError):
        inv.remove("fig", 2)
    assert inv.items == {"fig": 1}


def test_report():
    inv = Inventory()
    inv.add("pear", 2)
    inv.add("apple", 1)
    inv.add("pear", 1)
    assert stock_lines(inv) == ["apple: 1", "pear: 3"]
