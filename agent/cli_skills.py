"""``agent skills``: list, show, new and validate Agent Skills (SKILL.md folders)."""

from __future__ import annotations

import typer

skills_app = typer.Typer(help="Agent Skills: list, show, new, validate.", no_args_is_help=True,
                         rich_markup_mode=None)
