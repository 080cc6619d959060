"""``agent mcp serve`` and ``agent mcp install``: the agent as an MCP server for MCP hosts."""

from __future__ import annotations

import logging
import os
import secrets
import signal
import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.common import err
from agent.cli.mcp import mcp_app
from agent.errors import EXIT_CODES_HELP, UsageError
from agent.mcp_server.install import DEFAULT_NAME, HOSTS, plan, write
from agent.mcp_server.jobs import JobManager
from agent.ui import echo
from backend import secret_store

TOKEN_ENV = "DFLASH_AGENT_MCP_TOKEN"

RootOpt = Annotated[list[Path] | None, typer.Option(
    "--root", metavar="DIR", help="Workspace root the MCP host may use (repeatable; default: "
    "the current directory). Paths outside every root are refused.")]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@mcp_app.command("serve", epilog=EXIT_CODES_HELP)
def serve_cmd(
    root: RootOpt = None,
    http: Annotated[bool, typer.Option("--http", help="Serve streamable HTTP on 127.0.0.1 "
                                       "(bearer token printed on stderr) instead of stdio.")]
    = False,
    port: Annotated[int, typer.Option(help="HTTP port (0: a free one).")] = 0,
    preset: Annotated[str | None, typer.Option(help="Model preset for every task.")] = None,
    profile: Annotated[str | None, typer.Option(help="Speculation profile.")] = None,
    base_url: Annotated[str | None, typer.Option(help="Use this OpenAI-compatible server "
                                                 "instead of the managed one.")] = None,
    max_steps: Annotated[int | None, typer.Option(help="Model calls per task at most.")] = None,
    max_time: Annotated[float | None, typer.Option(help="Seconds per task at most.")] = None,
) -> None:
    """Serve the agent to MCP hosts (tools: run_task, new_project, session_status,
    session_result, cancel, undo). Starts warming the model server at once. Over stdio, stdout
    carries the protocol and logs go to stderr."""
    # deferred: the MCP server SDK, starlette and uvicorn cost ~1 s of every command's startup
    from agent.mcp_server.over_http import serve_http
    from agent.mcp_server.server import Roots, build_server

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="dflash-agent mcp: %(message)s")
    logging.getLogger("dflash_agent.mcp").setLevel(logging.INFO)
    roots = Roots(list(root or [Path.cwd()]))
    jobs = JobManager({"preset": preset, "profile": profile, "base_url": base_url,
                       "max_steps": max_steps, "max_time": max_time})
    server = build_server(roots, jobs)
    if not http:
        # `agent` turns SIGTERM and SIGHUP into an interrupt, but over stdio the SDK reads
        # stdin in a thread that nothing interrupts: a host that sent SIGTERM with our stdin
        # still open (the MCP spec's step after closing it) waited until it closed. So the
        # running tasks are cancelled here (each worker runs in a session of its own, which
        # the signal never reaches: a field trial's worker ran on, then died on a broken
        # pipe) and the process ends at once.
        def stop(signum: int, _frame: object) -> None:
            jobs.shutdown()
            os._exit(128 + signum)

        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, stop)
    jobs.warm()
    err.print(f"workspace roots: {', '.join(map(str, roots.paths))}", markup=False)
    try:
        if http:
            # From the store: a *_TOKEN variable is moved out of the environment at start.
            token = secret_store.get(TOKEN_ENV) or secrets.token_urlsafe(32)
            chosen = port or _free_port()
            err.print(f"MCP endpoint: http://127.0.0.1:{chosen}/mcp", markup=False)
            err.print(f"Authorization: Bearer {token}", markup=False)
            serve_http(server, token, chosen)
        else:
            try:
                server.run()
            except BaseExceptionGroup as group:
                # The host went away mid-answer (it crashed, or a timeout killed it): the
                # SDK's writer meets a closed pipe. A disconnect, not an internal error.
                _, rest = group.split((BrokenPipeError, ConnectionResetError))
                if rest is not None:
                    raise
    finally:
        jobs.shutdown()


@mcp_app.command("install", epilog=EXIT_CODES_HELP)
def install_cmd(
    host: Annotated[str, typer.Argument(help=f"One of: {', '.join(HOSTS)}.", metavar="HOST")],
    root: RootOpt = None,
    project: Annotated[Path, typer.Option(help="Project folder (claude-code and vscode keep "
                                          "their config there).")] = Path("."),
    name: Annotated[str, typer.Option(help="Server name in the host's config.")]
    = DEFAULT_NAME,
    write_file: Annotated[bool, typer.Option("--write", help="Write the entry into the host's "
                                             "config (after showing the diff).")] = False,
) -> None:
    """Print (or --write) the host's config entry that starts `agent mcp serve`."""
    if host not in HOSTS:
        raise UsageError(f"unknown host '{host}'; choose one of: {', '.join(HOSTS)}")
    for folder in root or []:
        if not folder.expanduser().is_dir():
            # `agent mcp serve` refuses it at every start: the host would only ever see a
            # server that fails (a field trial's install printed it without a word).
            raise UsageError(f"--root {folder}: not a folder; give an existing one")
    p = plan(host, list(root or [Path.cwd()]), project, name)  # type: ignore[arg-type]
    if not write_file:
        err.print(f"# add to {p.path} (or rerun with --write):", markup=False)
        echo(p.snippet, nl=False)
        return
    if p.new == p.old:
        err.print(f"{p.path} already has this entry; nothing to change", markup=False)
        return
    echo(p.diff(), nl=False)
    write(p)
    err.print(f"wrote {p.path}", markup=False)
