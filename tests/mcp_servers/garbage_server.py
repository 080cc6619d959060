"""An MCP server (stdio) that also prints non-protocol lines to stdout, at start and inside a
tool, as servers with stray ``print`` calls do."""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("noisy")


@server.tool()
def shout(text: str) -> str:
    """Return ``text`` in capitals (after printing junk to stdout)."""
    print("DEBUG: shouting now {not json")
    sys.stdout.flush()
    return text.upper()


if __name__ == "__main__":
    print("Starting noisy server v1.0 ...")
    print("<<< this is not JSON-RPC >>>")
    sys.stdout.flush()
    server.run()
