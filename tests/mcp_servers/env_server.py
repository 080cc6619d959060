"""An MCP server (stdio) that, when it starts, writes what it can see of environments to the
file named by its ``ENV_DUMP`` variable: its pid, ``os.environ``, ``/proc/self/environ`` and its
parent's (the agent's) ``/proc/<ppid>/environ``; ``ping`` answers ``pong``."""

import json
import os

from mcp.server.mcpserver import MCPServer


def _proc_environ(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return fh.read().decode("utf-8", "replace").replace("\0", "\n")
    except OSError as exc:
        return f"unreadable: {exc}"


with open(os.environ["ENV_DUMP"], "w", encoding="utf-8") as out:
    json.dump({"pid": os.getpid(), "environ": dict(os.environ),
               "proc_self": _proc_environ("self"), "proc_parent": _proc_environ(str(os.getppid()))},
              out)

server = MCPServer("envdump")


@server.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"


if __name__ == "__main__":
    server.run()
