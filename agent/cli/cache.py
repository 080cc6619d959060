"""Engines and models in the cache: ``agent backend download`` fetches a preset's model (and
draft), ``agent backend cache list`` and ``cache rm`` show and delete what is there."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.common import age
from agent.cli.options import JsonOut
from agent.config import load_settings
from agent.ui import Reporter, echo
from backend.cache import list_cache, remove
from backend.models.drafts import swa_quant_warning
from backend.models.hfdraft import resolve_draft
from backend.models.presets import get_preset
from backend.models.requant import requantized
from backend.models.sources import resolve_model
from backend.serve import server


def download_cmd(preset: Annotated[str | None, typer.Argument(help="Preset name.")] = None
                 ) -> None:
    """Fetch a preset's model (and draft) into the model cache, verified; a safetensors DFlash
    drafter (z-lab's) is converted to GGUF once, with the target's tokenizer files."""
    settings = load_settings()
    chosen = get_preset(preset or settings.preset)
    reporter = Reporter()
    model = requantized(resolve_model(chosen.model, reporter.note), chosen.requantize,
                        reporter.note)
    echo(f"{chosen.model} -> {model}")
    if chosen.draft:
        # A safetensors drafter is converted here, once (the converter's sdist: engine_sdist).
        draft = resolve_draft(chosen.draft, model, chosen.target_tokenizer, chosen.draft_type,
                              Path(settings.engine_sdist) if settings.engine_sdist else None,
                              reporter.note, window=chosen.draft_train_ctx)
        echo(f"{chosen.draft} -> {draft}")
        warning = swa_quant_warning(draft)
        if warning:
            reporter.note(warning)


def cache_list_cmd(json_out: JsonOut = False) -> None:
    """Cached engines and models with their size and when a server last used them."""
    entries = list_cache()
    if json_out:
        typer.echo(json.dumps([{**e.__dict__, "path": str(e.path)} for e in entries],
                              indent=2))
        return
    if not entries:
        echo("the cache is empty")
    now = time.time()
    for e in entries:
        used = f"used {age(now - e.last_used)} ago" if e.last_used else "never used"
        echo(f"{e.kind:<6}  {e.size_bytes / 2**20:>9.1f} MiB  {used:<16}  {e.name}")


def cache_rm_cmd(name: Annotated[str, typer.Argument(help="Engine key or model file name "
                                                     "(see `agent backend cache list`).")]
                 ) -> None:
    """Delete a cached engine or model (refused while a running server uses it)."""
    busy = {p.resolve() for s in server.running()
            for p in (s.plan.binary, s.plan.model, s.plan.draft) if p is not None}
    entry = remove(name, busy)
    echo(f"removed {entry.kind} {entry.name} ({entry.size_bytes / 2**20:.1f} MiB)")
