"""``agent mcp``: the MCP servers the agent uses (list, add, remove) and the agent as an MCP server
(serve, install; in :mod:`agent.cli.mcp_serve`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import git
import typer

from agent.errors import EXIT_ERROR, UsageError, UserError
from agent.ui import SafeConsole, echo
from tools.base import ToolContext
from tools.mcp import config as mcp_config
from tools.mcp.manager import McpManager
from tools.mcp.setup import startup_problems, trusted_configs
from tools.mcp.state import read_quarantines
from tools.mcp.tool import build_tools
from tools.registry import default_registry
from tools.workspace import Workspace

mcp_app = typer.Typer(help="MCP: servers the agent uses (list, add, remove) and the agent as "
                      "an MCP "
                      "server (serve, install).", no_args_is_help=True, rich_markup_mode=None)


Scope = Annotated[str, typer.Option("--scope", help="user (your home's mcp.json) or project "
                                    "(<repo>/.agents/mcp.json).")]
RepoOpt = Annotated[Path, typer.Option("--repo", metavar="DIR", help="Repository (default: "
                                       "the current directory).")]


def _repo_root(path: Path) -> Path:
    path = path.expanduser().resolve()
    try:
        return Path(git.Repo(path, search_parent_directories=True).working_tree_dir or path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return path


def _pairs(values: list[str] | None, flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for value in values or []:
        key, sep, val = value.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} takes KEY=VALUE, got '{value}'")
        out[key] = val
    return out


@mcp_app.command("add")
def add_cmd(
    name: Annotated[str, typer.Argument(help="Server name (tools appear as NAME__tool).")],
    command: Annotated[list[str] | None, typer.Argument(
        help="After --: the command and its arguments (stdio server).", metavar="-- CMD ARGS")]
    = None,
    url: Annotated[str | None, typer.Option(help="Streamable HTTP endpoint instead of a "
                                            "command.")] = None,
    header: Annotated[list[str] | None, typer.Option(
        metavar="KEY=VALUE", help="HTTP header (repeatable; ${VAR} is expanded at start).")]
    = None,
    env: Annotated[list[str] | None, typer.Option(
        metavar="KEY=VALUE", help="Environment variable for a stdio server (repeatable).")]
    = None,
    scope: Scope = "user",
    repo: RepoOpt = Path("."),
    force: Annotated[bool, typer.Option(help="Replace a server of the same name; add a stdio "
                                        "command that is not found here.")] = False,
) -> None:
    """Add an MCP server: `agent mcp add NAME -- CMD ARGS` or `agent mcp add NAME --url URL`."""
    if scope not in ("user", "project"):
        raise UsageError(f"--scope must be user or project, not '{scope}'")
    if bool(url) == bool(command):
        raise UsageError("give either a command after -- or --url (not both)")
    entry: dict[str, Any]
    if url:
        if env:
            raise UsageError("--env is for stdio servers; an http server takes --header")
        entry = {"type": "http", "url": url}
        if header:
            entry["headers"] = _pairs(header, "--header")
    else:
        if header:
            raise UsageError("--header is for http servers (--url)")
        assert command is not None
        entry = {"command": command[0], "args": command[1:]}
        if env:
            entry["env"] = _pairs(env, "--env")
    try:
        # The entry comes from these arguments: a bad one is bad usage (exit 2), named as the
        # command's, where add_server would blame the config file it was about to write.
        mcp_config.parse_entry(name, entry, Path("agent mcp add"), scope,  # type: ignore[arg-type]
                               env=False)
    except mcp_config.McpConfigError as exc:
        raise UsageError(str(exc)) from exc
    try:
        path = mcp_config.add_server(name, entry, scope,  # type: ignore[arg-type]
                                     _repo_root(repo) if scope == "project" else None, force)
    except mcp_config.McpConfigError as exc:
        raise UserError(str(exc)) from exc
    echo(f"added MCP server '{name}' to {path}")


@mcp_app.command("remove")
def remove_cmd(
    name: Annotated[str, typer.Argument(help="The server to remove.")],
    scope: Annotated[str | None, typer.Option(
        "--scope", help="user or project: where to remove it from (needed when both define "
        "it).")] = None,
    repo: RepoOpt = Path("."),
) -> None:
    """Remove an MCP server's entry from the config file it is in; every other entry and
    byte of that file stays as it was."""
    if scope not in (None, "user", "project"):
        raise UsageError(f"--scope must be user or project, not '{scope}'")
    try:
        paths = mcp_config.remove_server(name, _repo_root(repo), scope)  # type: ignore[arg-type]
    except mcp_config.McpConfigError as exc:
        raise UserError(str(exc)) from exc
    echo(f"removed MCP server '{name}' from {' and '.join(map(str, paths))}")


@mcp_app.command("list")
def list_cmd(repo: RepoOpt = Path("."),
             json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False
             ) -> None:
    """Configured MCP servers: connect to each, show status, tools and quarantines. Exit code 3
    when a configured server failed to start or its entry is invalid (all are still listed)."""
    err = SafeConsole(stderr=True, highlight=False, soft_wrap=True)
    root = _repo_root(repo)
    cfg = mcp_config.load(root)
    warnings: list[str] = [f"MCP config: {e}" for e in cfg.errors]
    allowed = {s.name for s in trusted_configs(cfg, warnings.append)}
    manager = McpManager([s for s in cfg.servers.values() if s.name in allowed], cwd=root)
    try:
        manager.start()
        # Failures are the rows' status; only a working server's stdout junk needs a warning.
        warnings += startup_problems(manager, failed=False)
        left_out = _left_out(manager, root)
        quarantines = read_quarantines()
        rows = []
        for name, server in cfg.servers.items():
            state = manager.servers.get(name)
            status = state.status if state else "untrusted (not started)"
            record = quarantines.get(name)
            dropped = left_out.get(name, {})
            rows.append({
                "name": name, "scope": server.scope, "source": str(server.source),
                "transport": server.transport, "target": server.describe(), "status": status,
                # A failure's own line lacks what explains it best: stderr, stray stdout.
                "error": (state.failure() if status == "failed" else state.error) if state
                else None,
                "tools": [t.name for t in state.tools if t.name not in dropped] if state
                else [],
                "left_out": [{"tool": t, "reason": r} for t, r in dropped.items()],
                "last_quarantine": record})
    finally:
        manager.close()
    for line in warnings:
        err.print(f"warning: {line}", markup=False)
    failed = [row["name"] for row in rows if row["status"] == "failed"]
    if json_out:
        typer.echo(json.dumps({"servers": rows}, indent=2))
    elif not rows:
        echo(f"no MCP servers configured (files: {mcp_config.user_file()}, "
                   + ", ".join(str(p) for p in mcp_config.project_files(root)) + ")")
    else:
        _print_rows(rows)
    problems = ([f"failed to start: {', '.join(failed)}"] if failed else []) \
        + ([f"{len(cfg.errors)} config problem(s), see the warnings"] if cfg.errors else [])
    if problems:
        err.print("error: MCP servers " + "; ".join(problems), markup=False)
        raise typer.Exit(EXIT_ERROR)


def _left_out(manager: McpManager, root: Path) -> dict[str, dict[str, str]]:
    """Per server, the tools a session would leave out (tool → why), decided the way a session
    decides it: next to the core tools, whose names MCP tools must not take."""
    core = default_registry(Workspace(root))
    try:
        _, left_out = build_tools(ToolContext(Workspace(root)), manager, core.tools)
    finally:
        core.close()
    out: dict[str, dict[str, str]] = {}
    for item in left_out:
        out.setdefault(item.server, {})[item.tool] = item.reason
    return out


def _print_rows(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        echo(f"{row['name']} [{row['scope']}, {row['transport']}] {row['target']}")
        echo(f"  status: {row['status']}" + (f" ({row['error']})" if row["error"] else ""))
        if row["tools"] or row["left_out"]:
            total = len(row["tools"]) + len(row["left_out"])
            count = f"{len(row['tools'])} of {total} used" if row["left_out"] else str(total)
            echo(f"  tools ({count}): " + (", ".join(row["tools"]) or "none"))
        for item in row["left_out"]:
            echo(f"  left out: {item['tool']} ({item['reason']})")
        if row["last_quarantine"]:
            q = row["last_quarantine"]
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(q.get("time", 0)))
            echo(f"  quarantined in session {q.get('session') or '?'} at {when}: "
                       f"{q.get('reason')}")
