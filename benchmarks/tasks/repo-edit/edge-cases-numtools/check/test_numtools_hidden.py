from numtools import digit_sum, largest, mean


def test_digit_sum_positive_and_zero():
    assert digit_sum(1234) == 10
    assert digit_sum(0) == 0


def test_digit_sum_negative():
    assert digit_sum(-1234) == 10
    assert digit_sum(-7) == 7


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5
    assert mean([-2, 2]) == 0


def test_mean_empty():
    assert mean([]) == 0.0


def test_largest():
    assert largest([3, -1, 9, 2]) == 9
    assert largest([-5, -2, -9]) == -2


def test_largest_empty():
    assert largest([]) is None
