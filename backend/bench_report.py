"""Showing a :class:`~backend.bench.BenchResult`: a rich table and a PNG bar chart.

The chart needs matplotlib, which comes with the ``plot`` extra
(``pip install 'dflash-agent[plot]'``); nothing else here does.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

from rich.table import Table

from backend.bench import BenchError, BenchResult, Stats

PLOT_EXTRA_HINT = "pip install 'dflash-agent[plot]'"


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _temp(value: float | None) -> str:
    return "all" if value is None else f"{value:g}"


def _row(table: Table, s: Stats) -> None:
    table.add_row(s.prompt or "overall", _temp(s.temperature), s.profile,
                  str(s.completion_tokens), _num(s.decode_tok_s), _num(s.prefill_tok_s),
                  str(s.draft_n), str(s.draft_accepted),
                  "-" if s.acceptance is None else f"{s.acceptance:.0%}",
                  "-" if s.speedup is None else f"{s.speedup:.2f}x")


def result_table(result: BenchResult) -> Table:
    """Per prompt and temperature, then overall: tokens, decode and prefill tok/s, draft
    tokens, accepted, acceptance and speedup vs the reference profile."""
    build = result.build_info or result.engine_version
    table = Table(title=f"{result.preset} on {result.flavour} llama-server {build}: "
                  f"{result.prompt_set} prompts, max_tokens {result.max_tokens}, "
                  f"{result.repeats} repeat(s), speedup vs {result.reference_profile}")
    for name in ("prompt", "temp", "profile"):
        table.add_column(name)
    for name in ("tokens", "decode tok/s", "prefill tok/s", "draft", "accepted", "accept",
                 "speedup"):
        table.add_column(name, justify="right")
    for i, stats in enumerate(result.per_prompt):
        _row(table, stats)
        if (i + 1) % len(result.profiles) == 0:
            table.add_section()
    for stats in result.overall:
        _row(table, stats)
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
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, format="png")
    except OSError as exc:
        raise BenchError(f"cannot write the chart to {path}: {exc}") from exc
    return path
