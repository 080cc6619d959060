import pytest
from buffer import TextBuffer


def test_undo_steps_back():
    b = TextBuffer("ab")
    b.append("cd")
    b.delete(3)
    b.append("xyz")
    assert b.text == "axyz"
    b.undo()
    assert b.text == "a"
    b.undo()
    assert b.text == "abcd"
    b.undo()
    assert b.text == "ab"
    with pytest.raises(IndexError):
        b.undo()


def test_nothing_to_undo():
    with pytest.raises(IndexError):
        TextBuffer().undo()


def test_clear_forgets_history():
    b = TextBuffer()
    b.append("hello")
    b.clear()
    assert b.text == ""
    with pytest.raises(IndexError):
        b.undo()


def test_existing_behaviour():
    b = TextBuffer("abc")
    b.delete(10)
    assert b.text == "" and len(b) == 0
    with pytest.raises(ValueError):
        b.delete(-1)
