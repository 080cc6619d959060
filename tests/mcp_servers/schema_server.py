"""An MCP server (stdio, low-level API so the schemas go out exactly as written) with one
ordinary tool and two whose input schemas cannot be made safe for the grammar: a ``$ref`` that
points nowhere, and a required property that admits no value."""

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOOLS = [
    types.Tool(name="echo", description="Echo the text.",
               input_schema={"type": "object", "properties": {"text": {"type": "string"}},
                             "required": ["text"]}),
    types.Tool(name="dangling", description="A $ref to a definition that is not there.",
               input_schema={"type": "object", "properties": {"x": {"$ref": "#/$defs/Gone"}}}),
    types.Tool(name="impossible", description="A required property that admits no value.",
               input_schema={"type": "object", "properties": {"x": {"not": {}}},
                             "required": ["x"]}),
]


async def list_tools(ctx, params) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx, params) -> types.CallToolResult:
    text = (params.arguments or {}).get("text", "")
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


server = Server("schemas", on_list_tools=list_tools, on_call_tool=call_tool)


async def main() -> None:
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
