"""The ``agent`` typer app, assembled: every command, by noun, under its name, in the order
``--help`` lists them. The commands live in their modules (``tasks``, ``chat``, ``history``,
``server``, ``cache``, ``measure``, ``backend``, ``worker``, ``mcp``, ``skills``)."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path
from typing import Annotated

import typer

# Imported for its side effect: it adds `mcp serve` and `mcp install` to mcp_app.
from agent.cli import mcp_serve  # noqa: F401
from agent.cli.backend import build_cmd, convert_draft_cmd, doctor_cmd, presets_cmd
from agent.cli.cache import cache_list_cmd, cache_rm_cmd, download_cmd
from agent.cli.chat import chat_cmd
from agent.cli.history import diff_cmd, resume_cmd, sessions_cmd, undo_cmd
from agent.cli.mcp import mcp_app
from agent.cli.measure import bench_cmd, calibrate_cmd
from agent.cli.server import down_cmd, status_cmd, up_cmd
from agent.cli.skills import skills_app
from agent.cli.tasks import new_project_cmd, run_cmd
from agent.cli.worker import worker_cmd
from agent.errors import CHAT_EXIT_CODES_HELP, EXIT_CODES_HELP, EXIT_OK
from agent.ui import echo

app = typer.Typer(help="dflash-agent: a local coding agent on its own llama-server with "
                  "speculative decoding.", no_args_is_help=True, epilog=EXIT_CODES_HELP,
                  rich_markup_mode=None, pretty_exceptions_enable=False)
app.command("new-project", epilog=EXIT_CODES_HELP)(new_project_cmd)
app.command("run", epilog=EXIT_CODES_HELP)(run_cmd)
app.command("chat", epilog=CHAT_EXIT_CODES_HELP)(chat_cmd)
app.command("resume", epilog=CHAT_EXIT_CODES_HELP)(resume_cmd)
app.command("sessions")(sessions_cmd)
app.command("undo", epilog=EXIT_CODES_HELP)(undo_cmd)
app.command("diff")(diff_cmd)

backend_app = typer.Typer(help="The managed inference server: build, download, up, down, "
                          "status.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(backend_app, name="backend")
backend_app.command("build", epilog=EXIT_CODES_HELP)(build_cmd)
backend_app.command("convert-draft", epilog=EXIT_CODES_HELP)(convert_draft_cmd)
backend_app.command("worker", epilog=EXIT_CODES_HELP)(worker_cmd)
backend_app.command("download", epilog=EXIT_CODES_HELP)(download_cmd)
backend_app.command("up", epilog=EXIT_CODES_HELP)(up_cmd)
backend_app.command("down", epilog=EXIT_CODES_HELP)(down_cmd)
backend_app.command("status", epilog=EXIT_CODES_HELP)(status_cmd)
backend_app.command("bench", epilog=EXIT_CODES_HELP)(bench_cmd)
backend_app.command("calibrate", epilog=EXIT_CODES_HELP)(calibrate_cmd)
backend_app.command("presets")(presets_cmd)
backend_app.command("doctor", epilog=EXIT_CODES_HELP)(doctor_cmd)

cache_app = typer.Typer(help="Engines and models in the cache: list, rm.", no_args_is_help=True,
                        rich_markup_mode=None)
backend_app.add_typer(cache_app, name="cache")
cache_app.command("list")(cache_list_cmd)
cache_app.command("rm", epilog=EXIT_CODES_HELP)(cache_rm_cmd)

app.add_typer(mcp_app, name="mcp")
app.add_typer(skills_app, name="skills")


def _installed_version() -> str:
    """The installed distribution's version; run from a source tree that was never installed
    (a copy on a machine without network, ``PYTHONPATH=.``), the tree's ``pyproject.toml``."""
    try:
        return metadata.version("dflash-agent")
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        try:
            version = tomllib.loads(pyproject.read_text("utf-8"))["project"]["version"]
        except (OSError, ValueError, KeyError, TypeError):
            return "unknown (not installed)"
        return f"{version} (source tree, not installed)"


def _version(value: bool) -> None:
    if value:
        echo(f"dflash-agent {_installed_version()}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")]
          = False,
          version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False,
          ) -> None:
    """--debug is read by :func:`agent.cli.main.main` before any command runs (tracebacks on
    errors)."""
