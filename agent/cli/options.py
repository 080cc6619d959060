"""The options several commands share, as typer ``Annotated`` types: one help text each."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

Preset = Annotated[str | None, typer.Option(help="Model preset (default: qwen2.5-coder-1.5b, "
                                           "smollm2-135m under 4 GiB of RAM, or `preset` in "
                                           "config.toml).")]
Profile = Annotated[str | None, typer.Option(help="Speculation profile: baseline, ngram "
                                             "(n-gram lookup: shorter lengths on a GPU; each "
                                             "request drafts only while that measures faster), "
                                             "ngram-fixed (llama.cpp's lengths, always on), "
                                             "dflash (draft length tuned per launch, off when "
                                             "it would not pay), dflash-fixed (always 15; "
                                             "BeeLlama <=0.3: its own defaults), "
                                             "dflash+ngram.")]
CtxSize = Annotated[int | None, typer.Option("--ctx-size", help="Context size in tokens.")]
# One meaning wherever tasks run: each task's own budget (a chat's second task starts afresh).
MaxSteps = Annotated[int | None, typer.Option(help="Model calls at most, per task (default: "
                                              "max_steps in config.toml, else 30).")]
MaxTime = Annotated[float | None, typer.Option(help="Seconds at most, per task (default: "
                                               "max_time in config.toml, else 1800).")]
Repo = Annotated[Path, typer.Option("--repo", metavar="DIR", help="Repository to work in "
                                      "(default: the current directory).")]
Approval = Annotated[str | None, typer.Option(help="ask, auto-edit (default) or full-auto.")]
BaseUrl = Annotated[str | None, typer.Option(help="Use this OpenAI-compatible server instead of "
                                             "the managed one.")]
ToolProtocol = Annotated[str | None, typer.Option(
    help="auto (see agent/protocols/choice.py), text, native, json or whole (files "
    "written whole in fences, commands in bash blocks).")]
NoGit = Annotated[bool, typer.Option("--no-git", help="Work outside git: no checkpoints, "
                                     "no undo.")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print events as JSON lines.")]
Skills = Annotated[list[str] | None, typer.Option(
    "--skill", metavar="NAME", help="Activate this skill (see `agent skills list`) before the "
    "model starts; repeatable.")]
