"""An MCP server (stdio) whose ``boom`` tool kills the process mid-call; ``ok`` answers."""

import os
import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("crashy")


@server.tool()
def ok() -> str:
    """Answer normally."""
    return "fine"


@server.tool()
def boom() -> str:
    """Die before answering."""
    sys.stderr.write("crash_server: dying mid-call\n")
    sys.stderr.flush()
    os._exit(3)


if __name__ == "__main__":
    server.run()
