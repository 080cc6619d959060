"""The results as tables (markdown) and a chart (PNG, with matplotlib when installed)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any


def _agent(record: dict[str, Any]) -> str:
    """The agent column: its label, and the preset when one was named."""
    preset = (record.get("config") or {}).get("preset")
    return f"{record.get('agent')} ({preset})" if preset else str(record.get("agent"))


def _latest(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per (agent configuration, task): the last one written (a rerun of a task
    replaces its earlier row in the tables; the file keeps both)."""
    kept: dict[tuple, dict[str, Any]] = {}
    for r in records:
        kept[(r.get("config_key"), r.get("suite"), r.get("task"))] = r
    return list(kept.values())


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (suite, agent): counts, pass rate, false successes, malformed calls, wall
    time, tokens (prefilled / cached / decoded), decode speed (decoded tokens over decode
    time, summed over the tasks' turns where known) and draft acceptance (ratio of sums)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in _latest(records):
        groups[(str(r.get("suite")), _agent(r))].append(r)
    rows = []
    for (suite, agent), rs in sorted(groups.items()):
        n = len(rs)
        passed = sum(bool(r.get("pass")) for r in rs)
        tok = [r for r in rs if r.get("decode_tok_s")]
        decode_s = sum(r["decode_tokens"] / r["decode_tok_s"] for r in tok)
        drafts = [r["draft"] for r in rs if r.get("draft")]
        drafted = sum(d.get("drafted") or 0 for d in drafts)
        rows.append({
            "suite": suite, "agent": agent, "tasks": n, "passed": passed,
            "pass_rate": passed / n if n else 0.0,
            "false_successes": sum(bool(r.get("false_success")) for r in rs),
            "malformed": sum((r.get("malformed") or {}).get("total", 0) for r in rs),
            "tool_calls": sum(r.get("tool_calls_total") or 0 for r in rs),
            "wall_s": sum(r.get("wall_s") or 0.0 for r in rs),
            "prefilled": sum((r.get("prompt_tokens") or {}).get("prefilled", 0) for r in rs),
            "cached": sum((r.get("prompt_tokens") or {}).get("cached", 0) for r in rs),
            "decoded": sum(r.get("decode_tokens") or 0 for r in rs),
            "decode_tok_s": (sum(r["decode_tokens"] for r in tok) / decode_s) if decode_s
            else None,
            "acceptance": (sum(d.get("accepted") or 0 for d in drafts) / drafted) if drafted
            else None,
        })
    return rows


def _fmt(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def markdown(records: list[dict[str, Any]]) -> str:
    """The summary table, then one row per task."""
    rows = summarize(records)
    lines = ["| suite | agent | passed | pass rate | false successes | malformed calls | "
             "wall s (total / mean) | prompt tokens prefilled / cached | decode tokens | "
             "decode tok/s | draft acceptance |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(
            f"| {r['suite']} | {r['agent']} | {r['passed']}/{r['tasks']} | "
            f"{r['pass_rate']:.0%} | {r['false_successes']} | {r['malformed']} | "
            f"{r['wall_s']:.0f} / {r['wall_s'] / r['tasks']:.1f} | "
            f"{r['prefilled']:,} / {r['cached']:,} | {r['decoded']:,} | "
            f"{_fmt(r['decode_tok_s'], '.1f')} | {_fmt(r['acceptance'], '.0%')} |")
    lines += ["", "| task | agent | pass | exit | stop | steps | tool calls | malformed | "
              "wall s | check |", "| --- | --- | --- | ---: | --- | ---: | ---: | ---: | ---: "
              "| --- |"]
    for r in sorted(_latest(records), key=lambda r: (str(r.get("suite")), str(r.get("task")),
                                                   _agent(r))):
        verdict = "yes" if r.get("pass") else ("**false success**" if r.get("false_success")
                                               else "no")
        lines.append(
            f"| {r.get('suite')}/{r.get('task')} | {_agent(r)} | {verdict} | "
            f"{r.get('exit_code')} | {r.get('stop_reason')} | {r.get('steps')} | "
            f"{r.get('tool_calls_total')} | {(r.get('malformed') or {}).get('total', 0)} | "
            f"{r.get('wall_s') or 0:.1f} | {(r.get('check') or {}).get('status')} |")
    return "\n".join(lines)


def plot(records: list[dict[str, Any]], path: Path) -> str | None:
    """A PNG chart at ``path``: pass rate per suite and agent, and decode speed. Returns
    None when written, else why not (matplotlib is not installed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib); no chart written"
    rows = summarize(records)
    names = [f"{r['suite']}\n{r['agent']}" for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(max(8, 2.2 * len(rows) + 4), 4.5))
    bars = left.bar(names, [100 * r["pass_rate"] for r in rows], color="#4c72b0")
    for bar, r in zip(bars, rows, strict=True):
        left.annotate(f"{r['passed']}/{r['tasks']}"
                      + (f"\n{r['false_successes']} false" if r["false_successes"] else ""),
                      (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                      ha="center", va="bottom", fontsize=8)
    left.set_ylim(0, 110)
    left.set_ylabel("tasks passed (%)")
    left.set_title("pass rate")
    right.bar(names, [r["decode_tok_s"] or 0 for r in rows], color="#55a868")
    right.set_ylabel("decode tokens / s")
    right.set_title("decode speed (llama-server timings)")
    for ax in (left, right):
        ax.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None
