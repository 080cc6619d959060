"""Showing a :class:`~backend.measure.results.BenchResult`: a rich table and a PNG bar chart.

The chart needs matplotlib, which comes with the ``plot`` extra
(``pip install 'dflash-agent[plot]'``); nothing else here does.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from rich import box
from rich.table import Table

from backend.measure.results import BenchError, BenchResult, Stats

PLOT_EXTRA_HINT = "pip install 'dflash-agent[plot]'"


def _rate(value: float | None) -> str:
    """Tokens/s: one decimal below 100, whole numbers above (the decimals are noise there)."""
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _temp(value: float | None) -> str:
    return "all" if value is None else f"{value:g}"


def prompt_labels(result: BenchResult) -> dict[str, str]:
    """Short labels of the prompts for the table, ``p1``, ``p2``… in the run's order (names
    can be long, prompt files' names arbitrary); the caption maps them back."""
    return {p.name: f"p{i}" for i, p in enumerate(result.prompts, start=1)}


def _row(table: Table, s: Stats, labels: dict[str, str]) -> None:
    table.add_row("all" if s.prompt is None else labels.get(s.prompt, s.prompt),
                  _temp(s.temperature), s.profile, str(s.completion_tokens),
                  _rate(s.decode_tok_s), _rate(s.prefill_tok_s),
                  str(s.draft_n), str(s.draft_accepted),
                  "-" if s.acceptance is None else f"{s.acceptance:.0%}",
                  "-" if s.speedup is None else f"{s.speedup:.2f}")


def result_table(result: BenchResult) -> Table:
    """Per prompt and temperature, then overall: tokens, decode and prefill tok/s, draft
    tokens, accepted, acceptance and speedup vs the reference profile.

    Short headers, prompt labels and whole-number rates keep it within 80 columns; the caption
    spells out the abbreviations and the prompt labels."""
    build = result.build_info or result.engine_version
    labels = prompt_labels(result)
    table = Table(title=f"{result.preset} on {result.flavour} llama-server {build}: "
                  f"{result.prompt_set} prompts, max_tokens {result.max_tokens}, "
                  f"{result.repeats} repeat(s)",
                  caption="tok tokens generated, dec/s and pre/s decode and prefill tokens/s, "
                  "drafts draft tokens proposed, acc accepted, acc% acceptance, ×ref decode "
                  f"speed relative to {result.reference_profile}; prompts: "
                  + ", ".join(f"{label} {name}" for name, label in labels.items()),
                  caption_justify="left", box=box.MINIMAL_HEAVY_HEAD, show_edge=False,
                  pad_edge=False)
    for name in ("prompt", "temp", "profile"):
        table.add_column(name, no_wrap=True)
    for name in ("tok", "dec/s", "pre/s", "drafts", "acc", "acc%", "×ref"):
        table.add_column(name, justify="right", no_wrap=True)
    for i, stats in enumerate(result.per_prompt):
        _row(table, stats, labels)
        if (i + 1) % len(result.profiles) == 0:
            table.add_section()
    for stats in result.overall:
        _row(table, stats, labels)
    return table


def require_matplotlib() -> ModuleType:
    """The ``matplotlib.figure`` module; raises :class:`BenchError` naming the ``plot`` extra
    when matplotlib is not installed."""
    try:
        return importlib.import_module("matplotlib.figure")
    except ImportError as exc:
        raise BenchError(f"--plot needs matplotlib, which comes with the plot extra: "
                         f"{PLOT_EXTRA_HINT}") from exc


def plot_result(result: BenchResult, path: Path) -> Path:
    """Write a PNG bar chart of decode tok/s per prompt and temperature (and overall), one bar
    per profile, speedups written above the bars; returns ``path``.

    Raises :class:`BenchError` without matplotlib or when the file cannot be written.
    """
    figure_mod = require_matplotlib()
    groups: list[tuple[str, list[Stats]]] = []
    rows = result.per_prompt + result.overall
    keys = list(dict.fromkeys((s.prompt, s.temperature) for s in rows))
    for prompt, temp in keys:
        label = f"{prompt or 'overall'}\nt={_temp(temp)}"
        groups.append((label, [s for s in rows if (s.prompt, s.temperature) == (prompt, temp)]))
    n_profiles = len(result.profiles)
    width = 0.8 / n_profiles
    fig = figure_mod.Figure(figsize=(max(6.0, 1.3 * len(groups) + 2), 4.8), dpi=100,
                            layout="constrained")
    ax = fig.add_subplot()
    for j, profile in enumerate(result.profiles):
        xs, heights, labels = [], [], []
        for i, (_, stats) in enumerate(groups):
            s = next(s for s in stats if s.profile == profile)
            xs.append(i + (j - (n_profiles - 1) / 2) * width)
            heights.append(s.decode_tok_s or 0.0)
            labels.append("" if s.speedup is None or profile == result.reference_profile
                          else f"{s.speedup:.2f}x")
        bars = ax.bar(xs, heights, width, label=profile)
        ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
    ax.set_xticks(range(len(groups)), [label for label, _ in groups], fontsize=7)
    ax.set_ylabel("decode tok/s")
    ax.set_title(f"{result.preset}: {result.prompt_set} prompts, "
                 f"{result.date:%Y-%m-%d}, {result.machine.cpu_threads} CPU threads"
                 + (f", {result.machine.gpus[0]}" if result.machine.gpus else ""), fontsize=9)
    ax.legend(fontsize=8)
    return save_png(fig, path, BenchError)


def save_png(fig: object, path: Path, error: type[Exception]) -> Path:
    """Write the matplotlib figure ``fig`` to ``path`` as PNG (parents created); returns
    ``path``. Raises ``error`` saying which file could not be written."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
    except OSError as exc:
        raise error(f"cannot write the chart to {path}: {exc}") from exc
    return path
