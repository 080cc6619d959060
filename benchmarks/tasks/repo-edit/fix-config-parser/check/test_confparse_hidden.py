import pytest
from confparse import parse

TEXT = """
# top comment
name = demo

[server]
host = localhost
  # indented comment
token = abc==
url = http://x/?a=1&b=2
"""


def test_sections_and_values():
    config = parse(TEXT)
    assert config[""] == {"name": "demo"}
    assert config["server"]["host"] == "localhost"


def test_values_keep_their_equals_signs():
    server = parse(TEXT)["server"]
    assert server["token"] == "abc=="
    assert server["url"] == "http://x/?a=1&b=2"


def test_indented_comment_is_skipped():
    assert set(parse(TEXT)["server"]) == {"host", "token", "url"}


def test_line_without_equals_names_its_line():
    with pytest.raises(ValueError, match="3"):
        parse("a = 1\n[s]\njust words\n")
