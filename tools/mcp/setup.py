"""Starting a session's MCP servers: read the config, ask before running project servers,
connect, and turn their tools into registry tools."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from tools.base import ToolContext
from tools.mcp import config as mcp_config
from tools.mcp.manager import McpManager
from tools.mcp.tool import McpTool, mcp_tools
from tools.registry import Registry


def trusted_configs(cfg: mcp_config.McpConfig, warn: Callable[[str], None],
                    ask: Callable[[str], str] | None = None,
                    interactive: bool | None = None) -> list[mcp_config.ServerConfig]:
    """The servers allowed to start: all user-scope ones, and project ones whose file the user
    trusts (asked once per file contents; ``ask`` defaults to ``input``). Without a terminal,
    untrusted project servers are skipped with a warning, never started silently."""
    tty = sys.stdin.isatty() if interactive is None else interactive
    prompt = ask or input
    allowed_files: set[Path] = set()
    for path in cfg.project_files:
        if mcp_config.is_trusted(path):
            allowed_files.add(path)
            continue
        servers = [s for s in cfg.servers.values() if s.source == path]
        if not servers:
            continue
        listing = "\n".join(f"  {s.name}: {s.describe()}" for s in servers)
        if not tty:
            warn(f"{path} defines MCP servers that have not been trusted; skipped (run "
                 "`agent mcp list` in a terminal to review and trust them):\n" + listing)
            continue
        answer = prompt(f"{path} wants to start these MCP servers (programs from the "
                        f"repository, run as you):\n{listing}\nTrust this file? [y/N] ")
        if answer.strip().lower() in {"y", "yes"}:
            mcp_config.trust(path)
            allowed_files.add(path)
        else:
            warn(f"MCP servers of {path} not started (not trusted)")
    return [s for s in cfg.servers.values() if s.scope == "user" or s.source in allowed_files]


def start_servers(root: Path | None, warn: Callable[[str], None], session_id: str = "",
                  ask: Callable[[str], str] | None = None,
                  interactive: bool | None = None) -> McpManager | None:
    """Connect the configured servers (None when none are configured); every problem becomes
    a ``warn`` line and the other servers still start."""
    cfg = mcp_config.load(root)
    for error in cfg.errors:
        warn(f"MCP config: {error}")
    allowed = trusted_configs(cfg, warn, ask, interactive)
    if not allowed:
        return None
    manager = McpManager(allowed, cwd=root, session_id=session_id)
    manager.start()
    for line in startup_problems(manager):
        warn(line)
    return manager


def startup_problems(manager: McpManager, failed: bool = True) -> list[str]:
    """One line per server that failed to start (when ``failed``) or that printed non-MCP
    lines on stdout: the SDK skips those lines, so without this a banner or a stray ``print``
    would only be in a log while the server looks healthy."""
    lines: list[str] = []
    for name, state in manager.servers.items():
        stray = state.stray_summary()
        if state.status == "ready":
            if stray:
                lines.append(f"MCP server '{name}' {stray}; they were skipped and the server "
                             "works, but it should write its logs to stderr")
        elif failed:
            lines.append(f"MCP server '{name}' failed to start: {state.failure()}")
    return lines


def add_mcp_tools(registry: Registry, ctx: ToolContext, manager: McpManager,
                  warn: Callable[[str], None]) -> list[McpTool]:
    """Register the servers' tools after the core ones; returns them."""
    tools = mcp_tools(ctx, manager, registry.tools, warn)
    for tool in tools:
        registry.add(tool)
    return tools
