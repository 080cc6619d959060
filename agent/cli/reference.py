"""The CLI reference, ``docs/cli.md``, written from the ``--help`` of every command.

``python -m agent.cli.reference`` rewrites the file (run from a checkout: the path is relative to
the source tree); ``--check`` exits 1 when it is stale. The text comes from the click command
typer builds for the ``agent`` app, each command asked for its ``--help`` as a user would, so the
reference says exactly what the CLI says, whatever module a command is defined in.
"""

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer
from typer.testing import CliRunner

PROG = "agent"
WIDTH = 80
"""Help is rendered at a fixed width so that the file does not depend on the terminal."""
REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
HEADER = """# CLI reference

Generated from the `--help` of every command by `python -m agent.cli.reference`; do not edit
by hand (`tests/test_cli_reference.py` fails when this file is stale). The guides in
[guide/](guide/) explain what the commands are for.
"""


def command_paths(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command path under ``command`` (a click command or group as typer builds it), the
    group itself first, subcommands in the order the group keeps them; hidden commands are left
    out as ``--help`` leaves them out."""
    yield path
    # Duck-typed: typer builds its groups on its own copy of click, not on ``click.Group``.
    for name, sub in getattr(command, "commands", {}).items():
        if not sub.hidden:
            yield from command_paths(sub, (*path, name))


def help_text(app: typer.Typer, path: tuple[str, ...]) -> str:
    """The ``--help`` output of ``agent PATH...`` at :data:`WIDTH` columns, colour off.

    Raises RuntimeError when the command does not print its help and exit 0.
    """
    result = CliRunner().invoke(app, [*path, "--help"], prog_name=PROG, env={"NO_COLOR": "1"},
                                terminal_width=WIDTH, max_content_width=WIDTH)
    if result.exit_code != 0:
        raise RuntimeError(f"{PROG} {' '.join(path)} --help exited {result.exit_code}: "
                           f"{result.output}")
    return result.output.rstrip() + "\n"


def render(app: typer.Typer | None = None) -> str:
    """The whole reference as Markdown: one section per command, its help in a text block."""
    if app is None:
        from agent.cli.app import app
    parts = [HEADER]
    for path in command_paths(typer.main.get_command(app)):
        title = " ".join((PROG, *path))
        parts.append(f"\n## `{title}`\n\n```text\n{help_text(app, path)}```\n")
    return "".join(parts)


def main(argv: list[str] | None = None) -> int:
    """Write :data:`REFERENCE`, or with ``--check`` compare it; returns the exit status (1:
    stale)."""
    args = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in args:
        current = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
        if current != text:
            print(f"{REFERENCE} is stale: run python -m agent.cli.reference", file=sys.stderr)
            return 1
        return 0
    REFERENCE.parent.mkdir(parents=True, exist_ok=True)
    REFERENCE.write_text(text, encoding="utf-8")
    print(f"wrote {REFERENCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
