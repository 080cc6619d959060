"""The managed server: ``agent backend up`` starts it (or reuses the running one), ``down``
stops it and ``status`` says what runs."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.common import err
from agent.cli.options import CtxSize, Preset, Profile
from agent.config import load_settings
from agent.errors import UsageError
from agent.ui import Reporter, echo
from backend.models.presets import PresetError, get_preset, parse_workers
from backend.serve import server
from backend.serve.launch import preset_workers, profile_for
from backend.serve.pipeline import LaunchRequest, launch, print_command


def up_cmd(preset: Preset = None, profile: Profile = None, ctx_size: CtxSize = None,
           port: Annotated[int | None, typer.Option(help="Preferred port.")] = None,
           parallel: Annotated[int, typer.Option(min=1, max=256, help="Server slots (-np): "
                                                 "sessions run side by side, one slot each; "
                                                 "the context is shared between slots.")] = 1,
           idle_timeout: Annotated[int | None, typer.Option(min=1, help="Seconds idle before "
                                                            "the server sleeps and frees the "
                                                            "model's memory; the next request "
                                                            "wakes it.")] = None,
           print_cmd: Annotated[bool, typer.Option("--print-cmd", help="Print the exact "
                                                   "llama-server command and exit.")] = False,
           force: Annotated[bool, typer.Option("--force", help="Launch even when the fit "
                                               "check says the models and context do not fit "
                                               "this machine's free memory.")] = False,
           rpc: Annotated[str | None, typer.Option(
               "--rpc", metavar="HOST:PORT,...",
               help="Spread the model's layers over these RPC workers (each an `agent backend "
                    "worker`); overrides the preset's `rpc`.")] = None
           ) -> None:
    """Start the managed server (or reuse the running one with the same configuration)."""
    settings = load_settings(cli={"preset": preset, "profile": profile, "ctx_size": ctx_size,
                                  "port": port})
    chosen = get_preset(settings.preset)
    try:
        workers = parse_workers(rpc) if rpc is not None else preset_workers(chosen)
    except ValueError as exc:
        raise UsageError(f"--rpc: {exc}") from exc
    try:
        profile_for(chosen, settings.profile)
    except PresetError as exc:
        # Before the engine is built (minutes on a first run, then exit 3), and the same exit
        # as --print-cmd's (2): a field trial got both for one command line.
        raise UsageError(str(exc)) from exc
    request = LaunchRequest(
        chosen, profile=settings.profile, ctx_size=settings.ctx_size, parallel=parallel,
        idle_timeout=idle_timeout, rpc=workers, force=force, port=settings.port,
        timeout=settings.server_start_timeout,
        sdist=Path(settings.engine_sdist) if settings.engine_sdist else None)
    if print_cmd:
        try:
            preview = print_command(request)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        for line in preview.notes:
            err.print(f"note: {line}", markup=False)
        echo(shlex.join(preview.argv))
        return
    reporter = Reporter()
    try:
        state, reused = launch(request, progress=reporter.build_progress, note=reporter.note)
    finally:
        reporter.close()
    verb = "reusing" if reused else "started"
    over = f", over RPC workers {','.join(state.plan.rpc)}" if state.plan.rpc else ""
    echo(f"{verb} llama-server pid {state.pid} at {state.base_url} "
               f"(preset {chosen.name}, profile {state.plan.profile}{over})")
    if state.speculation:
        echo(f"speculation: {state.speculation}")


def down_cmd(all_servers: Annotated[bool, typer.Option("--all", help="Stop every server "
                                                       "dflash-agent started.")] = False
             ) -> None:
    """Stop the current managed server (the one most recently started or reused), or all."""
    stopped = server.down(all_servers)
    if not stopped:
        echo("no managed server is running")
    for state in stopped:
        echo(f"stopped llama-server pid {state.pid} ({state.base_url})")
    for state in server.unproven():
        echo(f"note: {server.unproven_line(state)}")


def status_cmd(json_out: Annotated[bool, typer.Option("--json", help="JSON output.")] = False
               ) -> None:
    """Running managed servers: binary, flavour, model, profile, port, uptime, context
    size, and a line for a server whose RPC worker went away; a server whose process is gone
    is said in one line and its state file removed."""
    alive, gone = server.sweep(explain=True)
    for state, why in gone:
        # --json keeps stdout the list of running servers; the line goes to stderr there.
        line = (f"removed the stale state file of llama-server pid {state.pid} "
                f"({state.base_url}): {why}")
        if json_out:
            err.print(f"note: {line}", markup=False)
        else:
            echo(line)
    for state in server.unproven():
        err.print(f"note: {server.unproven_line(state)}", markup=False)
    infos = [server.describe(s) for s in alive]
    if json_out:
        typer.echo(json.dumps(infos, indent=2))
        return
    if not infos:
        echo("no managed server is running (start one with `agent backend up`)")
    for info in infos:
        echo(f"{info['url']}  pid {info['pid']}  preset {info['preset']}  profile "
             f"{info['profile']}  n_ctx {info['n_ctx']}  up {info['uptime_s']} s\n"
             f"  binary {info['binary']} ({info['flavour']})\n  model  {info['model']}"
             f"\n  log    {info['log']}")
        if info.get("speculation"):
            echo(f"  speculation {info['speculation']}")
        if info["rpc"]:
            echo(f"  RPC workers {', '.join(info['rpc'])}")
        if info["problem"]:
            echo(f"  problem {info['problem']}")
