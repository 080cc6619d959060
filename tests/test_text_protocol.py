"""The ``text`` tool-call format (agent/protocols/text.py): every rule of its docstring."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types
import pytest

from agent.protocols import text as text_protocol
from agent.protocols.base import FormatError, tools_with_final
from agent.protocols.text import (
    cut_detail,
    mismatched,
    parse_text_calls,
    render_call,
    string_typed,
    usage,
)
from tools.base import ToolContext
from tools.mcp.manager import McpManager
from tools.mcp.tool import McpTool
from tools.registry import Registry, default_registry
from tools.workspace import Workspace


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    return default_registry(Workspace(tmp_path_factory.mktemp("ws")))


@pytest.fixture(scope="module")
def schemas(registry: Registry) -> dict[str, dict[str, Any]]:
    return {t["function"]["name"]: t["function"]["parameters"]
            for t in tools_with_final(registry.openai_tools())}


def calls(text: str, schemas: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(c.name, c.arguments) for c in parse_text_calls(text, schemas)]


TRICKY = [
    pytest.param("x = 1\n", id="plain"),
    pytest.param("no final newline", id="no-final-newline"),
    pytest.param("\tindented\twith tabs\n  trailing spaces   \n", id="tabs-trailing-spaces"),
    pytest.param("windows\r\nline ends\r\n", id="crlf"),
    pytest.param("\nstarts with a blank line\n\n", id="leading-blank-line"),
    pytest.param("", id="empty"),
    pytest.param("héllo — ünïcode ✓ 日本語 🙂\n", id="unicode"),
    pytest.param('s = "</file_text>"\n', id="close-tag-inline"),
    pytest.param("doc:\n</file_text>\n</create>\nmore\n", id="close-tags-on-own-lines"),
    pytest.param('"""\n<create>\n<path>a.py</path>\n<file_text>\nx\n</file_text>\n</create>\n'
                 '"""\n', id="a-whole-call-inside"),
    pytest.param("ends with its close tag </file_text>", id="ends-with-close-tag"),
    pytest.param("<view><path>not a call</path></view>\n", id="another-tool-inside"),
]


@pytest.mark.parametrize("content", TRICKY)
def test_file_content_round_trips_byte_for_byte(content: str, schemas):
    text = render_call("create", {"path": "t.py", "file_text": content}, schemas["create"])
    assert calls(text, schemas) == [("create", {"path": "t.py", "file_text": content})]
    # ...also followed by another call, which is neither swallowed nor lost.
    both = text + "\n" + render_call("bash", {"command": "pytest -q"}, schemas["bash"])
    assert calls(both, schemas) == [("create", {"path": "t.py", "file_text": content}),
                                    ("bash", {"command": "pytest -q"})]


@pytest.mark.parametrize("content", TRICKY)
def test_content_lands_in_the_file_byte_for_byte(content: str, registry: Registry, schemas):
    # A new file each time: create keeps an existing file's line ends.
    path = f"f{abs(hash(content))}.txt"
    [call] = parse_text_calls(render_call("create", {"path": path, "file_text": content},
                                          schemas["create"]), schemas)
    obs = registry.call(call.name, call.arguments)
    assert not obs.is_error, obs.text
    written = registry.tools["view"].ctx.workspace.root / path
    assert written.read_bytes() == content.encode("utf-8")


def test_this_protocol_s_own_sources_round_trip(schemas):
    # The hardest content there is: files that describe and test this very format.
    for source in (Path(text_protocol.__file__), Path(__file__)):
        content = source.read_text("utf-8")
        reply = "Writing it.\n" + render_call("create", {"path": source.name,
                                                          "file_text": content},
                                               schemas["create"])
        assert calls(reply, schemas) == [("create", {"path": source.name,
                                                     "file_text": content})]


def test_block_form_as_a_model_writes_it(schemas):
    reply = "<create>\n<path>a.py</path>\n<file_text>\ndef f():\n    return 1\n</file_text>\n" \
            "</create>"
    assert calls(reply, schemas) == [("create", {"path": "a.py",
                                                 "file_text": "def f():\n    return 1\n"})]
    # Only one line break after the opening tag goes; CRLF counts as one.
    assert calls("<create><path>a</path><file_text>\r\nx\r\n</file_text></create>",
                 schemas)[0][1]["file_text"] == "x\r\n"
    assert calls("<create><path>a</path><file_text>\n\nx</file_text></create>",
                 schemas)[0][1]["file_text"] == "\nx"
    # Inline values are exact, spaces included.
    assert calls("<bash><command> echo  hi </command></bash>", schemas) == [
        ("bash", {"command": " echo  hi "})]


def test_several_calls_run_in_order_and_prose_around_them_is_ignored(schemas):
    reply = ("I'll look first.\n<view>\n<path>a.py</path>\n</view>\nThen list files:\n"
             "<glob><pattern>*.py</pattern></glob>\nand finish.\n"
             "<final_answer>\n<text>done</text>\n</final_answer>\nBye.")
    assert calls(reply, schemas) == [("view", {"path": "a.py"}), ("glob", {"pattern": "*.py"}),
                                     ("final_answer", {"text": "done"})]
    assert [c.line for c in parse_text_calls(reply, schemas)] == [2, 6, 8]


def test_two_calls_of_the_same_tool_stay_apart(schemas):
    reply = "<view><path>a</path></view>\nand\n<view><path>b</path></view>"
    assert calls(reply, schemas) == [("view", {"path": "a"}), ("view", {"path": "b"})]


def test_non_string_values_are_json(schemas):
    reply = ("<view>\n<path>a.py</path>\n<view_range>[1, 40]</view_range>\n</view>\n"
             "<bash><command>serve</command><background>true</background>"
             "<timeout> 30 </timeout></bash>\n"
             "<insert><path>a</path><insert_line>0</insert_line><text>x</text></insert>\n"
             "<view><path>b</path><view_range>null</view_range></view>")
    assert calls(reply, schemas) == [
        ("view", {"path": "a.py", "view_range": [1, 40]}),
        ("bash", {"command": "serve", "background": True, "timeout": 30}),
        ("insert", {"path": "a", "insert_line": 0, "text": "x"}),
        ("view", {"path": "b", "view_range": None})]
    # A string parameter keeps JSON-looking text as it is.
    assert calls("<bash><command>[1, 2]</command></bash>", schemas) == [
        ("bash", {"command": "[1, 2]"})]


@pytest.mark.parametrize("value", ["one to five", ""])
def test_a_non_json_value_is_a_format_error_with_line_and_example(value: str, schemas):
    with pytest.raises(FormatError) as err:
        parse_text_calls(f"<view>\n<path>a</path>\n<view_range>{value}</view_range>\n</view>",
                         schemas)
    message = str(err.value)
    assert message.startswith("line 3:") and "<view_range> of view takes JSON" in message
    assert "[1, 40]" in message


def test_schema_types_decide_raw_or_json():
    root = {"$defs": {"Mode": {"enum": [1, 2]}, "Name": {"type": "string"}}}
    assert string_typed({"$ref": "#/$defs/Name"}, root)
    assert not string_typed({"$ref": "#/$defs/Mode"}, root)
    assert string_typed({"anyOf": [{"type": "string"}, {"type": "null"}]}, root)
    assert not string_typed({"anyOf": [{"type": "integer"}, {"type": "null"}]}, root)
    assert string_typed({"enum": ["a", "b"]}, root)
    assert string_typed({}, root)  # no type information: raw text
    assert not string_typed({"type": ["boolean", "null"]}, root)
    assert not string_typed({"const": True}, root)


def test_mcp_tools_use_their_schema_and_keep_their_validation(tmp_path: Path):
    schema = {"type": "object", "required": ["query", "limit"],
              "properties": {"query": {"type": "string"}, "limit": {"type": "integer"},
                             "tags": {"type": "array", "items": {"type": "string"}},
                             "exact": {"type": "boolean"}}}
    tool = McpTool(ToolContext(Workspace(tmp_path)), McpManager([]), "srv",
                   mcp_types.Tool(name="search", input_schema=schema), "srv__search")
    schemas = {"srv__search": tool.parameters()}
    reply = ("<srv__search>\n<query>a \"quoted\" <b>query</b>\n</query>\n<limit>5</limit>\n"
             '<tags>["x", "y"]</tags>\n<exact>false</exact>\n</srv__search>')
    [call] = parse_text_calls(reply, schemas)
    assert call.arguments == {"query": 'a "quoted" <b>query</b>\n', "limit": 5,
                              "tags": ["x", "y"], "exact": False}
    assert tool.parse(call.arguments) == call.arguments
    text = render_call("srv__search", call.arguments, schemas["srv__search"])
    assert parse_text_calls(text, schemas)[0].arguments == call.arguments


def test_every_registry_tool_round_trips(schemas):
    samples = {"string": "line one\n\tline two </x>", "integer": 3, "boolean": True,
               "array": [1, -1], "number": 1.5}
    for name, schema in schemas.items():
        args = {}
        for key, prop in schema.get("properties", {}).items():
            kind = prop.get("type") or prop["anyOf"][0]["type"]
            args[key] = samples[kind]
        assert calls(render_call(name, args, schema), schemas) == [(name, args)], name


def test_unknown_and_missing_parameters_are_left_to_the_registry(registry: Registry, schemas):
    [(name, args)] = calls("<create>\n<path>a.txt</path>\n<content>x</content>\n</create>",
                           schemas)
    assert (name, args) == ("create", {"path": "a.txt", "content": "x"})
    assert mismatched(args, schemas["create"])
    assert not mismatched({"path": "a", "file_text": ""}, schemas["create"])
    obs = registry.call(name, args)
    assert obs.is_error and "file_text: Field required" in obs.text
    assert usage("create", schemas["create"]) == \
        "<create>\n<path>…</path>\n<file_text>…</file_text>\n</create>"
    assert usage("bash_kill", schemas["bash_kill"]) == \
        "<bash_kill>\n<job_id>JSON</job_id>\n</bash_kill>"


def test_an_unknown_tool_is_a_call_only_where_it_looks_like_one(registry: Registry, schemas):
    [(name, args)] = calls("Let me list.\n<list_files>\n<dir>.</dir>\n</list_files>", schemas)
    assert (name, args) == ("list_files", {"dir": "."})
    assert "unknown tool 'list_files'" in registry.call(name, args).text
    # Markup in prose is prose: not at a line start, or no parameter tag inside.
    assert calls("Use a <div><p>x</p></div> here.", schemas) == []
    assert calls("<b>bold</b> words", schemas) == []


def test_a_call_that_is_never_closed_is_a_format_error_with_the_form(schemas):
    with pytest.raises(FormatError) as err:
        parse_text_calls("ok\n<view>\n<path>a.py\n", schemas)
    message = str(err.value)
    assert message.startswith("line 2:") and "never closed with </view>" in message
    assert message.endswith("<view>\n<path>…</path>\n</view>")


def test_a_parameter_that_is_never_closed_is_a_format_error(schemas):
    with pytest.raises(FormatError, match=r"<file_text> \(line 3\) is not closed with "
                                          r"</file_text> before </create>"):
        parse_text_calls("<create>\n<path>a</path>\n<file_text>\nx\n</create>", schemas)


def test_text_between_parameters_is_a_format_error(schemas):
    with pytest.raises(FormatError) as err:
        parse_text_calls("<view>\nAll done.\n<path>a.py</path>\n</view>", schemas)
    assert "text outside a parameter tag: 'All done.'" in str(err.value)
    assert "<view>\n<path>…</path>\n</view>" in str(err.value)


def test_a_bare_body_is_the_value_of_the_one_required_string_parameter(schemas):
    """Rule 11: Qwen2.5-Coder-1.5B wrote its final answer with no <text> tag (issue 49)."""
    calls = parse_text_calls("<final_answer>\nAll done.\n</final_answer>", schemas)
    assert [(c.name, c.arguments) for c in calls] == [("final_answer", {"text": "All done.\n"})]
    calls = parse_text_calls("<view>src/app.py</view>", schemas)
    assert [(c.name, c.arguments) for c in calls] == [("view", {"path": "src/app.py"})]
    # Two required parameters: no guess.
    with pytest.raises(FormatError, match="text outside a parameter tag"):
        parse_text_calls("<create>\nprint(1)\n</create>", schemas)


def test_a_call_left_open_ends_where_the_next_call_opens(schemas):
    """Rule 10: the model left out </create> before its final answer (issue 49)."""
    text = ("<create>\n<path>a.py</path>\n<file_text>\nx = 1\n</file_text>\n"
            "<final_answer>\n<text>done</text>\n</final_answer>")
    calls = parse_text_calls(text, schemas)
    assert [(c.name, c.arguments) for c in calls] == [
        ("create", {"path": "a.py", "file_text": "x = 1\n"}), ("final_answer", {"text": "done"})]
    # A closing tag further on is still the call's end; with none, an open call that
    # no next call ends stays an error.
    with pytest.raises(FormatError, match="never closed"):
        parse_text_calls("<create>\n<path>a.py</path>\n<file_text>\nx = 1\n", schemas)
    # At the end of the reply too: the 1.5B's final answer, never closed, after a fixed file.
    calls = parse_text_calls("<final_answer>\nadd() now returns a + b.\n", schemas)
    assert [(c.name, c.arguments) for c in calls] == [
        ("final_answer", {"text": "add() now returns a + b.\n"})]


def test_a_parameter_given_twice_is_a_format_error(schemas):
    with pytest.raises(FormatError, match="line 3: <path> is given twice in <view>"):
        parse_text_calls("<view>\n<path>a</path>\n<path>b</path>\n</view>", schemas)


def test_a_malformed_second_call_fails_the_whole_reply(schemas):
    with pytest.raises(FormatError, match="line 2: the <bash> call is never closed"):
        parse_text_calls("<view><path>a</path></view>\n<bash><command>ls", schemas)


def test_prose_only_has_no_calls_and_stray_close_tags_in_prose_are_tolerated(schemas):
    assert calls("", schemas) == []
    assert calls("I think the answer is 42.", schemas) == []
    assert calls("<view><path>a</path></view>\noops </path> stray", schemas) == [
        ("view", {"path": "a"})]


def test_the_last_close_tag_decides_when_content_holds_the_call_end(schemas):
    # The file's own text holds "</file_text>" then "</create>" on their own lines: the call
    # ends at the </create> after which nothing but another call follows.
    content = "Write calls like:\n<file_text>\nbody\n</file_text>\n</create>\nthat is all\n"
    reply = ("<create>\n<path>doc.md</path>\n<file_text>\n" + content + "</file_text>\n"
             "</create>\n<view><path>doc.md</path></view>")
    assert calls(reply, schemas) == [("create", {"path": "doc.md", "file_text": content}),
                                     ("view", {"path": "doc.md"})]


def test_cut_detail_names_the_cut_call(schemas):
    names = set(schemas)
    assert cut_detail("<view><path>a</path></view>\n<create>\n<path>a</path>\n<file_text>\n"
                      "<view> inside the content", names) == (
        "inside the <create> call opened on line 2; nothing in the reply was run")
    assert cut_detail("<view><path>a</path></view> and then", names).startswith(
        "after its last complete call")
    assert cut_detail("# # # # #", names) == "before it wrote a tool call"
