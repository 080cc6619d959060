import pytest

from agent.protocols.base import (
    FINAL_ANSWER,
    FormatError,
    calls_in_text,
    json_response_format,
    lenient_json,
    parse_json_call,
)

KNOWN = {"create", "view", "bash"}


def test_json_response_format_offers_every_tool_and_final_answer():
    tools = [{"type": "function", "function": {"name": "view", "description": "d",
                                               "parameters": {"type": "object",
                                                              "properties": {}}}}]
    fmt = json_response_format(tools)
    options = fmt["json_schema"]["schema"]["anyOf"]
    assert [o["properties"]["tool"]["const"] for o in options] == ["view", FINAL_ANSWER]
    assert all(o["required"] == ["tool", "arguments"] for o in options)


def test_json_call_parses_and_errors_are_precise():
    assert parse_json_call('{"tool": "view", "arguments": {"path": "a"}}') == (
        "view", {"path": "a"})
    with pytest.raises(FormatError, match="not valid JSON"):
        parse_json_call('{"tool": "view", "arguments": {"path": ')
    with pytest.raises(FormatError, match="empty reply"):
        parse_json_call("  ")
    with pytest.raises(FormatError, match="no \"tool\" name"):
        parse_json_call('{"arguments": {}}')
    with pytest.raises(FormatError, match="must be an object"):
        parse_json_call('{"tool": "view", "arguments": [1]}')
    with pytest.raises(FormatError, match="must be a JSON object"):
        parse_json_call("[1, 2]")


def test_lenient_json_accepts_what_small_models_write():
    assert lenient_json('{"a": "line1\nline2",}') == {"a": "line1\nline2"}
    assert lenient_json("{'a': True, 'b': [1, 2,]}") == {"a": True, "b": [1, 2]}
    with pytest.raises(ValueError):
        lenient_json("{nope")


@pytest.mark.parametrize("text", [
    'Sure.\n<tool_call>\n{"name": "view", "arguments": {"path": "a.py"}}\n</tool_call>',
    'I will look:\n```json\n{"name": "view", "arguments": {"path": "a.py"}}\n```',
    '{"tool": "view", "arguments": {"path": "a.py"}}',
    '<function=view>\n<parameter=path>\na.py\n</parameter>\n</function>',
    '<tool_call>{"name": "view", "arguments": "{\\"path\\": \\"a.py\\"}"}</tool_call>',
    "<tool_call>{'name': 'view', 'arguments': {'path': 'a.py',}}</tool_call>",
])
def test_tool_calls_written_as_text_are_recovered(text: str):
    assert calls_in_text(text, KNOWN) == [("view", {"path": "a.py"})]


def test_prose_and_unknown_tools_are_not_calls():
    assert calls_in_text("Here is the code:\n```python\nprint(1)\n```", KNOWN) == []
    assert calls_in_text('<tool_call>{"name": "launch", "arguments": {}}</tool_call>',
                         KNOWN) == []


def test_a_broken_text_call_to_a_known_tool_is_a_format_error():
    with pytest.raises(FormatError, match="could not be parsed"):
        calls_in_text('<tool_call>{"name": "create", "arguments": {"path": </tool_call>', KNOWN)
