"""``agent backend presets`` and ``agent backend doctor``: listing and checking, no launches."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from agent.config_checks import CONFIG_CHECKS
from agent.errors import EXIT_ERROR
from backend.doctor import run_checks
from backend.preset_status import ModelFile, PresetStatus, all_preset_status

JsonOut = Annotated[bool, typer.Option("--json", help="JSON output.")]
MIB = 2**20


def _file_text(f: ModelFile) -> str:
    if f.problem:
        return f"{f.source} ({f.problem})"
    if f.path is None:
        return f"{f.source} (not downloaded)"
    return f"{f.source} ({(f.size_bytes or 0) / MIB:.0f} MiB)"


def _status_json(s: PresetStatus) -> dict:
    def file(f: ModelFile | None) -> dict | None:
        if f is None:
            return None
        return {"source": f.source, "path": str(f.path) if f.path else None,
                "size_bytes": f.size_bytes, "problem": f.problem}

    fit = None
    if s.fit is not None:
        fit = {"fits": s.fit.fits, "suggested_ctx": s.fit.suggested_ctx,
               "gpu_need_mib": round(s.fit.need("gpu")), "ram_need_mib": round(s.fit.need("host")),
               "gpu_free_mib": s.fit.gpu.free_mib if s.fit.gpu else None,
               "ram_available_mib": round(s.fit.ram_available_mib),
               "components": [{"name": c.name, "mib": round(c.mib, 1), "where": c.where}
                              for c in s.fit.components]}
    return {"name": s.preset.name, "description": s.preset.description,
            "profile": s.preset.profile, "ctx_size": s.preset.ctx_size,
            "model": file(s.model), "draft": file(s.draft), "uses_draft": s.uses_draft,
            "fit": fit, "fit_note": s.fit_note}


def presets_cmd(json_out: JsonOut = False,
                verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show the memory "
                                                      "estimate of presets whose files are "
                                                      "downloaded.")] = False) -> None:
    """Presets (packaged and from <config>/presets.toml): model and draft sources, sizes when
    downloaded, context, profile, and whether they fit this machine. Never downloads."""
    statuses = all_preset_status()
    if json_out:
        typer.echo(json.dumps([_status_json(s) for s in statuses], indent=2))
        return
    for s in statuses:
        typer.echo(f"{s.preset.name}  profile {s.preset.profile}  ctx {s.preset.ctx_size}  "
                   f"{s.fit_note}")
        if s.preset.description:
            typer.echo(f"  {s.preset.description}")
        typer.echo(f"  model  {_file_text(s.model)}")
        if s.draft is not None:
            unused = "" if s.uses_draft else "  [not used by this profile]"
            typer.echo(f"  draft  {_file_text(s.draft)}{unused}")
        if verbose and s.fit is not None:
            typer.echo(s.fit.table())


def doctor_cmd(json_out: JsonOut = False,
               min_free_disk: Annotated[float | None, typer.Option(
                   "--min-free-disk", help="MiB of free disk below which the disk check fails "
                   "(default 2048, or $DFLASH_AGENT_MIN_FREE_DISK_MIB).")] = None) -> None:
    """Check GPU, driver, CUDA, cmake, compilers, disk, RAM, engine and model cache, running
    servers, and the config files (presets.toml, config.toml, mcp.json); say what to do about
    each problem. Exits 3 when a check fails."""
    checks = run_checks(min_free_disk, CONFIG_CHECKS)
    if json_out:
        typer.echo(json.dumps([c.__dict__ for c in checks], indent=2))
    else:
        for c in checks:
            typer.echo(f"{c.status.upper():<4}  {c.name:<12}  {c.detail}")
            if c.fix:
                typer.echo(f"{'':<4}  {'':<12}  → {c.fix}")
        fails = sum(c.status == "fail" for c in checks)
        warns = sum(c.status == "warn" for c in checks)
        typer.echo(f"{fails} failed, {warns} warning(s), {len(checks) - fails - warns} ok")
    if any(c.status == "fail" for c in checks):
        raise typer.Exit(EXIT_ERROR)
