"""Hostile-but-real MCP tool schemas against the real llama-server's grammar compiler.

Each schema is sent the way the agent sends tool schemas in the ``json`` protocol: embedded in
the ``response_format`` json_schema (``agent.protocols.base.json_response_format``), which
llama-server compiles into a grammar. Unsanitised, the ones in :data:`REJECTED` make the server
answer 400; sanitised, every schema compiles, and the server's original schema still judges
the arguments.
"""

from __future__ import annotations

from typing import Any

import httpx2
import mcp_types
import pytest

from agent.protocols.base import json_response_format
from tools.base import ToolContext, ToolError
from tools.mcp.config import ServerConfig
from tools.mcp.manager import McpManager
from tools.mcp.schema import UnsafeSchema, sanitize
from tools.mcp.state import ServerState
from tools.mcp.tool import McpTool, mcp_tools
from tools.workspace import Workspace


def obj(props: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, **extra}


TREE = {"$defs": {"Node": {"type": "object", "properties": {
    "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
    "required": ["name"]}}, "type": "object", "properties": {"root": {"$ref": "#/$defs/Node"}},
    "required": ["root"]}

REJECTED: dict[str, dict[str, Any]] = {
    # $ref cycles: a recursive tree (refs resolve against the embedding document, not the
    # tool's schema), JSON-tree style "#" self reference, a pure A -> B -> A cycle.
    "ref_cycle_tree": TREE,
    "ref_cycle_root": obj({"value": {"type": "string"},
                           "children": {"type": "array", "items": {"$ref": "#"}}}),
    "ref_cycle_pure": {"type": "object", "properties": {"a": {"$ref": "#/$defs/A"}},
                       "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}},
    # 10 000-item bounds.
    "bounds_items": obj({"ids": {"type": "array", "items": {"type": "string"},
                                 "minItems": 10000, "maxItems": 10000}}, required=["ids"]),
    "bounds_length": obj({"key": {"type": "string", "minLength": 10000}}, required=["key"]),
    "bounds_pattern": obj({"key": {"type": "string", "pattern": "^a{10000}$"}}),
    # description: null, as a model dumped without exclude_none writes it (with its siblings).
    "null_keywords": obj({"path": {"type": "string", "description": None, "pattern": None,
                                   "format": None, "minLength": None}}, required=["path"]),
    # Other real-world breakage of the same family.
    "boolean_subschema": obj({"anything": True, "nothing": False}),
    "empty_enum": obj({"mode": {"type": "string", "enum": []}}),
    "float_bound": obj({"tags": {"type": "array", "items": {"type": "string"},
                                 "minItems": 1.0}}),
    "huge_range": obj({"n": {"type": "integer", "minimum": -1e300, "maximum": 1e300}}),
}

ACCEPTED_RAW: dict[str, dict[str, Any]] = {
    # This llama.cpp build (b11434) accepts these unsanitised: a lookahead pattern falls back to
    # "any string" with a warning, `not` is ignored, `anyOf` next to `properties` drops the
    # properties, a null description is not read. They are still rewritten (see schema.py).
    "lookahead_pattern": obj({"password": {"type": "string",
                                           "pattern": "^(?=.*[A-Z])(?=.*[0-9]).{8,}$"}},
                             required=["password"]),
    "not_empty": obj({"name": {"type": "string"}, "never": {"not": {}}}, required=["name"]),
    "anyof_with_properties": {"type": "object", "properties": {"a": {"type": "string"},
                                                               "b": {"type": "integer"}},
                              "anyOf": [{"required": ["a"]}, {"required": ["b"]}]},
    "description_null": obj({"x": {"type": "string", "description": None}}),
    "nullable_anyof": obj({"since": {"anyOf": [{"type": "string", "format": "date-time"},
                                               {"type": "null"}], "default": None}}),
}


def compile_on_server(base_url: str, schema: dict[str, Any]) -> httpx2.Response:
    tool = {"type": "function", "function": {"name": "srv__tool", "description": "d",
                                             "parameters": schema}}
    body = {"messages": [{"role": "user", "content": "call the tool"}], "max_tokens": 4,
            "response_format": json_response_format([tool])}
    return httpx2.post(f"{base_url}/v1/chat/completions", json=body, timeout=120)


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_hostile_schema_fails_raw_and_passes_sanitised(real_server, name: str):
    base_url = real_server("baseline").base_url
    raw = compile_on_server(base_url, REJECTED[name])
    assert raw.status_code == 400, raw.text
    assert "parser generation failed" in raw.text or "failed to parse grammar" in raw.text
    safe = compile_on_server(base_url, sanitize(REJECTED[name]))
    assert safe.status_code == 200, safe.text


@pytest.mark.parametrize("name", sorted(ACCEPTED_RAW))
def test_schemas_this_build_accepts_still_compile_sanitised(real_server, name: str):
    base_url = real_server("baseline").base_url
    assert compile_on_server(base_url, ACCEPTED_RAW[name]).status_code == 200
    safe = sanitize(ACCEPTED_RAW[name])
    assert compile_on_server(base_url, safe).status_code == 200
    text = str(safe)
    assert "(?=" not in text and "'not'" not in text and "None" not in text


def test_sanitiser_rewrites():
    tree = sanitize(TREE)
    assert "$defs" not in tree and "$ref" not in str(tree)
    node = tree["properties"]["root"]
    # The cycle is cut where the reference comes back: any value, judged by the original.
    assert node["required"] == ["name"] and node["properties"]["children"]["items"] == {}
    either = sanitize(ACCEPTED_RAW["anyof_with_properties"])
    assert [o["required"] for o in either["anyOf"]] == [["a"], ["b"]]
    assert all(o["properties"].keys() == {"a", "b"} for o in either["anyOf"])
    assert sanitize(ACCEPTED_RAW["nullable_anyof"])["properties"]["since"] == {
        "type": "string", "format": "date-time"}
    assert "never" not in sanitize(ACCEPTED_RAW["not_empty"])["properties"]
    assert sanitize(REJECTED["bounds_items"])["properties"]["ids"] == {
        "type": "array", "items": {"type": "string"}}


@pytest.mark.parametrize("schema, why", [
    ({"type": "array"}, "not 'object'"),
    (obj({"x": {"$ref": "#/$defs/Missing"}}), "cannot be resolved"),
    (obj({"x": {"$ref": "https://example.invalid/s.json"}}), "points outside"),
    (obj({"x": {"not": {}}}, required=["x"]), "admits no value"),
    (obj({f"p{i}": {"$ref": "#/$defs/D0"} for i in range(4)},
         **{"$defs": {f"D{i}": obj({"a": {"$ref": f"#/$defs/D{i + 1}"},
                                    "b": {"$ref": f"#/$defs/D{i + 1}"}})
                      for i in range(20)} | {"D20": {"type": "string"}}}),
     "more than"),
])
def test_unsafe_schemas_are_refused_with_a_reason(schema: dict[str, Any], why: str):
    with pytest.raises(UnsafeSchema, match=why):
        sanitize(schema)


def test_arguments_are_validated_against_the_original_schema(tmp_path):
    remote = mcp_types.Tool(name="login", input_schema=ACCEPTED_RAW["lookahead_pattern"])
    tool = McpTool(ToolContext(Workspace(tmp_path)), McpManager([]), "srv", remote,
                   "srv__login")
    assert "pattern" not in tool.parameters()["properties"]["password"]
    assert tool.parse({"password": "Secret123"}) == {"password": "Secret123"}
    with pytest.raises(ToolError, match="password: 'secret' does not match"):
        tool.parse({"password": "secret"})
    never = mcp_types.Tool(name="n", input_schema=ACCEPTED_RAW["not_empty"])
    tool = McpTool(ToolContext(Workspace(tmp_path)), McpManager([]), "srv", never, "srv__n")
    with pytest.raises(ToolError, match="never: 1 should not be valid"):
        tool.parse({"name": "x", "never": 1})


def test_a_tool_whose_schema_cannot_be_made_safe_is_left_out_with_a_warning(tmp_path):
    manager = McpManager([])
    manager.servers["srv"] = ServerState(
        ServerConfig("srv", tmp_path / "mcp.json", "user", command="unused"), status="ready",
        tools=[mcp_types.Tool(name="broken", input_schema=obj({"x": {"$ref": "#/nope"}})),
               mcp_types.Tool(name="invalid", input_schema=obj({"x": {"type": 5}})),
               mcp_types.Tool(name="fine", input_schema=REJECTED["ref_cycle_tree"])])
    warnings: list[str] = []
    tools = mcp_tools(ToolContext(Workspace(tmp_path)), manager, {"view"}, warnings.append)
    assert [t.name for t in tools] == ["srv__fine"]
    assert "MCP tool 'broken' of server 'srv' left out: $ref '#/nope' cannot be resolved" \
        in warnings
    assert any("'invalid'" in w and "not valid JSON Schema" in w for w in warnings)


def test_null_keywords_are_dropped_before_validating_so_the_tool_is_kept(tmp_path):
    """Field case 16: "description": null, "title": null, "pattern": null left the tool out
    as "not valid JSON Schema" although sanitising drops them."""
    schema = obj({"path": {"type": "string", "description": None, "title": None,
                           "pattern": None, "default": None},
                  "mode": {"enum": ["a", None], "const": None, "title": None}},
                 required=["path"])
    schema["description"] = None
    manager = McpManager([])
    manager.servers["srv"] = ServerState(
        ServerConfig("srv", tmp_path / "mcp.json", "user", command="unused"), status="ready",
        tools=[mcp_types.Tool(name="read", input_schema=schema)])
    warnings: list[str] = []
    [tool] = mcp_tools(ToolContext(Workspace(tmp_path)), manager, {"view"}, warnings.append)
    assert warnings == [] and tool.name == "srv__read"
    assert tool.parse({"path": "a.txt"}) == {"path": "a.txt"}
    with pytest.raises(ToolError, match="'path' is a required property"):
        tool.parse({})
