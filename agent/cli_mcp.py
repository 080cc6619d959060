"""``agent mcp``: the MCP servers the agent uses (list, add) and the agent as an MCP server
(serve, install; in :mod:`agent.cli_mcp_serve`)."""

from __future__ import annotations

import typer

mcp_app = typer.Typer(help="MCP: servers the agent uses (list, add) and the agent as an MCP "
                      "server (serve, install).", no_args_is_help=True, rich_markup_mode=None)
