from pagination import page, page_count


def test_first_page():
    assert page(list(range(1, 11)), 1, 3) == [1, 2, 3]


def test_second_page():
    assert page(list(range(1, 11)), 2, 3) == [4, 5, 6]


def test_page_count():
    assert page_count(list(range(10)), 3) == 4
