import pytest
from pagination import page, page_count

ITEMS = list(range(1, 11))


def test_last_page_is_partial():
    assert page(ITEMS, 4, 3) == [10]


def test_page_past_the_end_is_empty():
    assert page(ITEMS, 5, 3) == []


def test_every_item_appears_once():
    pages = [page(ITEMS, n, 3) for n in range(1, page_count(ITEMS, 3) + 1)]
    assert [x for p in pages for x in p] == ITEMS


def test_bad_arguments_still_raise():
    with pytest.raises(ValueError):
        page(ITEMS, 0, 3)
