"""Forwards ``python -m agent.mcp_worker`` to :mod:`agent.mcp_server.worker`.

An ``agent mcp serve`` started before an upgrade still spawns its task workers by this old module
path; without this file its next task would fail to start until the MCP host restarts it.
"""

import sys

from agent.mcp_server.worker import main

if __name__ == "__main__":
    sys.exit(main())
