"""An MCP server (stdio) whose ``later`` tool never finishes: every call is answered with an
``input_required`` result that carries only a request state ("retry later"), which the client
retries until its round limit; ``ok`` answers."""

import mcp_types as types
from mcp.server.mcpserver import MCPServer

server = MCPServer("retry")


@server.tool()
def ok() -> str:
    """Answer normally."""
    return "fine"


@server.tool()
def later() -> types.InputRequiredResult:
    """Ask to be retried, every time."""
    return types.InputRequiredResult(request_state="not yet")


if __name__ == "__main__":
    server.run()
