"""Showing progress: events as short lines on stderr (rich), or JSONL on stdout (``--json``)."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from agent.events import Event, FinalAnswer, ModelTurn, ToolCall, ToolResult


class Reporter:
    """Receives events and progress notes; ``json_mode`` prints events as JSON lines."""

    def __init__(self, json_mode: bool = False):
        self.json_mode = json_mode
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self._progress: Progress | None = None
        self._task: TaskID | None = None

    def event(self, event: Event) -> None:
        if self.json_mode:
            sys.stdout.write(event.model_dump_json() + "\n")
            sys.stdout.flush()
            return
        if isinstance(event, ModelTurn):
            t = event.timings
            if t is not None:
                speed = f"{t.predicted_per_second or 0:.0f} tok/s"
                accept = (f", accepted {t.draft_n_accepted}/{t.draft_n} drafts"
                          if t.draft_n else "")
                self.console.print(f"[dim]step {event.step}: prefill {t.prompt_n} "
                                   f"(cached {t.cache_n}), decode {t.predicted_n} tokens at "
                                   f"{speed}{accept}[/dim]")
        elif isinstance(event, ToolCall):
            self.console.print(f"[cyan]→ {event.name}[/cyan] {_short(event.arguments)}",
                               markup=True)
        elif isinstance(event, ToolResult):
            style = "red" if event.is_error else "green"
            first = event.text.strip().splitlines()[:1] or [""]
            self.console.print(f"  [{style}]{'✗' if event.is_error else '✓'}[/{style}] "
                               f"{first[0][:160]}", markup=True)
        elif isinstance(event, FinalAnswer) and event.text:
            self.console.print(f"[bold]{event.reason}[/bold]: {event.text[:500]}")

    def note(self, message: str) -> None:
        """A one-line status message (server loading, model download…)."""
        if not self.json_mode:
            self.console.print(f"[dim]{message}[/dim]")

    def build_progress(self, step: str, done: int | None, total: int | None) -> None:
        """Engine build progress callback (see ``backend.engines.Progress``)."""
        if self.json_mode:
            return
        if self._progress is None:
            self.console.print("[bold]Building llama-server[/bold] (first run only; the full "
                               "log is kept beside the engine)")
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      TextColumn("{task.completed}/{task.total}"),
                                      TimeElapsedColumn(), console=self.console, transient=True)
            self._progress.start()
            self._task = self._progress.add_task(step, total=None)
        assert self._task is not None
        self._progress.update(self._task, description=step, completed=done or 0, total=total)
        if step == "install":
            self._progress.stop()

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def _short(args: Any) -> str:
    text = json.dumps(args, ensure_ascii=False)
    return text if len(text) <= 120 else text[:117] + "..."
