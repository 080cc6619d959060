from text_utils import slugify, title_slug


def test_docstring_example():
    assert slugify("Hello, World!") == "hello-world"


def test_runs_collapse_and_ends_are_trimmed():
    assert slugify("  --Python 3.12  is   OUT!! ") == "python-3-12-is-out"


def test_non_ascii_is_dropped():
    assert slugify("Café au lait") == "caf-au-lait"


def test_nothing_left():
    assert slugify("!!! ???") == ""
    assert slugify("") == ""


def test_max_length_cut_without_trailing_dash():
    assert slugify("abc def ghi", max_length=4) == "abc"
    assert slugify("abcdef", max_length=3) == "abc"
    assert len(slugify("word " * 40)) <= 50


def test_caller():
    assert title_slug("Release Notes", 2024) == "2024-release-notes"
