"""Measuring the speculation profiles on this machine: ``agent backend bench`` compares them
side by side, ``agent backend calibrate`` stores the cost model the tuned profiles launch
with."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.common import err, installed_engine
from agent.cli.options import CtxSize, Preset
from agent.config import load_settings
from agent.errors import UsageError, UserError
from agent.ui import Reporter, SafeConsole, echo
from backend.measure.bench import (
    default_result_path,
    different_answers,
    parse_profiles,
    parse_temperatures,
    run_bench,
    write_result,
)
from backend.measure.calibrate import (
    calibrate,
    parse_lengths,
    plot_calibration,
    table_lines,
)
from backend.measure.calibrate import default_result_path as calibration_path
from backend.measure.prompts import load_prompts
from backend.measure.report import plot_result, require_matplotlib, result_table
from backend.models.presets import get_preset
from backend.serve import server


def bench_cmd(
    preset: Preset = None,
    profiles: Annotated[str | None, typer.Option(help="Comma-separated profiles to compare "
                                                 "(default: baseline and the preset's own).")]
    = None,
    prompts: Annotated[str, typer.Option(help="seed (the three coding prompts of the DFlash "
                                         "write-up), edit (return a file with one rename, "
                                         "three sizes) or a JSON/text prompts file.")]
    = "seed",
    max_tokens: Annotated[int, typer.Option(min=1, help="max_tokens per request.")] = 1200,
    temperatures: Annotated[str, typer.Option(help="Comma-separated temperatures; each "
                                              "prompt runs at each.")] = "0.7,0",
    repeats: Annotated[int, typer.Option(min=1, help="Times each request is sent to each "
                                         "profile.")] = 1,
    ctx_size: CtxSize = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the results here "
                                                   "(default: <state>/bench/<date>.json).")]
    = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG bar chart here (needs the "
                                              "plot extra).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Launch even when the fit check "
                                        "says a server does not fit.")] = False,
    one_at_a_time: Annotated[bool, typer.Option("--one-at-a-time", help="One server at a "
                                                "time, rounds alternating the profile order "
                                                "(automatic when the servers do not fit side "
                                                "by side).")] = False,
    synth_accept: Annotated[float | None, typer.Option(
        "--synth-accept", min=0.0, max=1.0,
        help="Each drafted token accepted with probability P whatever the draft proposes "
             "(b11434's --spec-synth-rates): what a better draft would give on this machine. "
             "Output text is not valid; tuned profiles choose their length for P.")] = None,
) -> None:
    """Compare speculation profiles on one binary and model: one server per profile side by
    side, requests interleaved; per prompt and overall tokens, decode and prefill tok/s,
    draft acceptance and speedup vs baseline."""
    settings = load_settings(cli={"preset": preset, "ctx_size": ctx_size})
    chosen = get_preset(settings.preset)
    names = parse_profiles(profiles, chosen)
    temps = parse_temperatures(temperatures)
    prompt_set, prompt_list = load_prompts(prompts)
    _check_output(json_path, "--json")
    _check_output(plot, "--plot")
    if plot is not None:
        require_matplotlib()
    engine = installed_engine(settings, Reporter())
    result = run_bench(chosen, engine, names, prompt_list, prompt_set=prompt_set,
                       temperatures=temps, max_tokens=max_tokens, repeats=repeats,
                       ctx_size=settings.ctx_size, start_timeout=settings.server_start_timeout,
                       force=force,
                       note=lambda message: err.print(message, markup=False, style="dim"),
                       one_at_a_time=one_at_a_time, synth_accept=synth_accept)
    table_out = SafeConsole(highlight=False, soft_wrap=True)
    if not table_out.is_terminal:  # piped or logged: rich's 80 columns would cut the table
        table_out = SafeConsole(highlight=False, soft_wrap=True, width=160)
    table_out.print(result_table(result))
    for line in different_answers(result):
        echo(f"note: {line}")
    written = write_result(result, json_path or default_result_path(result))
    echo(f"results: {written}")
    if plot is not None:
        echo(f"chart: {plot_result(result, plot)}")


def _check_output(path: Path | None, flag: str) -> None:
    """Raise :class:`UsageError` when ``path`` (a results file a command writes after
    minutes of measuring) cannot be written: an existing folder, or a nearest existing parent
    that is a file or not writable. A field trial lost a whole bench this way."""
    if path is None:
        return
    target = path.expanduser().absolute()
    if target.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; give a file name")
    parent = next(p for p in target.parents if p.exists())
    if not parent.is_dir():
        raise UsageError(f"{flag} {path}: {parent} is a file, so it cannot be made")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {path}: no permission to write in {parent}")


def calibrate_cmd(
    preset: Preset = None,
    profile: Annotated[str, typer.Option(help="The speculative profile whose steps to "
                                         "measure (dflash, dflash-fixed, dflash+ngram).")]
    = "dflash",
    lengths: Annotated[str, typer.Option(help="Comma-separated draft lengths to measure "
                                         "(1..15).")] = "1,2,3,5,7,15",
    check_accept: Annotated[float, typer.Option(
        "--check-accept", min=0.0, max=1.0,
        help="Also measure each length at this synthetic per-token acceptance, to correct "
             "the model for partial acceptance (0: skip).")] = 0.75,
    tokens: Annotated[int | None, typer.Option(
        min=16, help="Tokens decoded per request (default: half a second of plain decoding, "
        "64 to 512).")] = None,
    repeats: Annotated[int, typer.Option(min=1, help="Timed requests per configuration "
                                         "(the median counts).")] = 3,
    ctx_size: CtxSize = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the run here "
                                                   "(default: <state>/calibrate/<date>.json)."
                                                   )] = None,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of speed against acceptance "
                                              "length per draft length (plot extra).")]
    = None,
    force: Annotated[bool, typer.Option("--force", help="Launch even when the fit check "
                                        "says the servers do not fit.")] = False,
) -> None:
    """Measure what a speculative step costs on this engine, model, draft and device (plain
    decoding and each draft length, synthetic acceptance), store the cost model the tuned
    profiles launch with, and print speedup against acceptance with break-even marked."""
    settings = load_settings(cli={"preset": preset, "ctx_size": ctx_size})
    chosen = get_preset(settings.preset)
    wanted = parse_lengths(lengths)
    _check_output(json_path, "--json")
    _check_output(plot, "--plot")
    if plot is not None:
        require_matplotlib()  # before minutes of measuring, not after
    engine = installed_engine(settings, Reporter())
    with server.interrupt_on_termination():  # a killed run stops its servers too
        result = calibrate(chosen, engine, profile=profile, lengths=wanted,
                           check_p=check_accept or None, tokens=tokens, repeats=repeats,
                           ctx_size=settings.ctx_size or 4096,
                           start_timeout=settings.server_start_timeout, force=force,
                           note=lambda message: err.print(message, markup=False, style="dim"))
    for line in table_lines(result):
        echo(line)
    path = json_path or calibration_path(result)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.model_dump_json(indent=2), "utf-8")
    except OSError as exc:
        raise UserError(f"cannot write the results to {path}: {exc}") from exc
    echo(f"cost model: {result.stored}")
    echo(f"results: {path}")
    if plot is not None:
        echo(f"chart: {plot_calibration(result, plot)}")
