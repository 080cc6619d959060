"""The live reporter: events as short lines on stderr (rich), or JSONL on stdout (``--json``);
a waiting request's spinner or progress lines; engine build progress."""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from agent.acceptance import collapse_note
from agent.events import Event, FinalAnswer, ModelTurn, Timings, ToolCall, ToolResult
from agent.ui.console import SafeConsole
from agent.ui.lines import (
    DIFF_EDITS,
    PREVIEW_LINES,
    draft_length_text,
    reply_misses,
    result_summary,
    stop_line,
)
from agent.ui.watch import PROGRESS_EVERY_S, TICK_S, RequestWatch
from backend.engine.buildlog import LOG_STEP
from tools.create import lines_label


def _rate(per_second: float | None) -> str:
    """A decode speed for a step line: whole tokens a second from 10 up, one decimal below
    (0.45 tok/s read "0 tok/s", as if the server had stalled)."""
    rate = per_second or 0.0
    return f"{rate:.0f}" if rate >= 10 or rate == 0 else f"{rate:.1f}"


def _short(args: Any) -> str:
    text = json.dumps(args, ensure_ascii=False)
    return text if len(text) <= 120 else text[:117] + "..."


class Reporter:
    """Receives events and progress notes; ``json_mode`` prints events as JSON lines."""

    def __init__(self, json_mode: bool = False):
        self.json_mode = json_mode
        self.console = SafeConsole(stderr=True, highlight=False, soft_wrap=True)
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._build_plain: tuple[float, float, str] | None = None
        """A build reported as plain lines (not a terminal): its start, last line, step."""
        self._build_log = "in the engine's folder"
        """Where the build's full log is (its first progress step says)."""
        self._wait: Progress | None = None
        self._wait_task: TaskID | None = None
        self._watch: RequestWatch | None = None
        self._stop_ticks: threading.Event | None = None
        self._ticker: threading.Thread | None = None
        self._streaming = False
        self._protocol = "json"
        self._started = 0.0
        self.draft_length: str | None = None
        # What a step line says of a request's own length where that is not a draft model's
        # (n-gram lookup's guard: "n-gram lookup off"); None: draft_length_text.
        self.request_label: Callable[[int], str] | None = None
        # False where the server drafts by n-gram lookup only: a low acceptance there says
        # nothing of a draft model's template or thinking (collapse_note), and the n-gram
        # guard turns lookup off by itself.
        self.draft_model = True
        """The server's drafting, shown on every step line (``draft length 3``, ``drafting
        off``); None when it has no draft model."""
        self.totals = {"prefilled": 0, "reused": 0, "decoded": 0, "drafted": 0, "accepted": 0,
                       "reply_misses": 0, "turns": 0, "reuse_unknown": 0}
        self._previous: tuple[int, int] | None = None
        self._collapse_said = False
        """(prompt tokens, decoded tokens) of the last request, to spot cache misses."""

    def event(self, event: Event) -> None:
        if self.json_mode:
            sys.stdout.write(event.model_dump_json() + "\n")
            sys.stdout.flush()
            return
        if isinstance(event, ModelTurn):
            t = event.timings
            if t is not None:
                self._status_line(event, t)
        elif isinstance(event, ToolCall):
            self._show_call(event.name, event.arguments, event.preview)
        elif isinstance(event, ToolResult):
            style = "red" if event.is_error else "green"
            first, *rest = result_summary(event.name, event.text, event.is_error)
            # Text, not markup: results often hold "[...]" (MCP frames, exit codes), which rich
            # would take for a tag and swallow.
            self.console.print(Text.assemble(
                "  ", ("✗" if event.is_error else "✓", style), " ", first))
            for line in rest:
                self.console.print(Text("    " + line))
        elif isinstance(event, FinalAnswer):
            if self.totals["turns"]:
                self.console.print(Text(self.summary_line(), style="dim"))
            if event.reason != "done":
                self.console.print(Text(stop_line(event.reason, event.text, event.steps),
                                        style="bold yellow"))
            elif event.text:
                self.console.print(Text.assemble(("done", "bold"), f": {event.text[:500]}"))

    def _status_line(self, event: ModelTurn, t: Timings) -> None:
        tot = self.totals
        prompt, reused, decoded = t.prompt_n or 0, t.cache_n or 0, t.predicted_n or 0
        tot["turns"] += 1
        tot["prefilled"] += prompt
        tot["reused"] += reused
        tot["decoded"] += decoded
        tot["drafted"] += t.draft_n or 0
        tot["accepted"] += t.draft_n_accepted or 0
        # A server that does not report its cache reuse (vLLM without prompt-tokens details)
        # gives no cache_n: nothing is claimed about reuse, and no miss is counted.
        unknown = t.cache_n is None and (t.model_extra or {}).get("source") == "usage"
        tot["reuse_unknown"] += unknown
        missed = 0 if unknown else reply_misses(self._previous, reused, prompt)
        tot["reply_misses"] += missed
        # A reply cut at max_tokens with no call is kept as a short stub (agent.loop._cut),
        # not as decoded: no token of it is expected back from the cache.
        cut = event.finish_reason == "length" and not event.tool_calls
        self._previous = (prompt + reused, 0 if cut else decoded)
        # Tokens, not drafts: "29/64 drafts" read as 64 drafts (a fresh-clone trial).
        accept = (f" · accepted {t.draft_n_accepted} of {t.draft_n} drafted tokens"
                  if t.draft_n else "")
        if event.draft_n_max is not None:  # this request's own length (a per-request server)
            accept += f" · {(self.request_label or draft_length_text)(event.draft_n_max)}"
        elif self.draft_length:
            accept += f" · {self.draft_length}"
        miss = f" · re-prefilled {missed} of the last reply" if missed else ""
        reuse = "reuse not reported" if unknown else f"reused {reused}"
        self.console.print(Text(f"step {event.step} · prefill {prompt} ({reuse}){miss} · "
                                f"decode {decoded} at {_rate(t.predicted_per_second)} tok/s"
                                f"{accept}", style="dim"))
        cause = None if self._collapse_said or not self.draft_model else collapse_note(
            t.draft_n, t.draft_n_accepted, event.content, event.usage, event.reasoning)
        if cause:
            self._collapse_said = True  # once per session: the cause does not change per turn
            self.console.print(Text(f"note: {cause}", style="yellow"))

    def summary_line(self) -> str:
        """The session's totals: prompt tokens served from cache, tokens decoded, the share of
        them that came from accepted drafts, and reply tokens the cache lost."""
        t = self.totals
        prompt = t["prefilled"] + t["reused"]
        cached = f"{t['reused'] / prompt:.0%}" if prompt else "-"
        if t["reuse_unknown"] == t["turns"]:
            reuse = f"{prompt} prompt tokens (the server does not report cache reuse)"
        else:
            if t["reuse_unknown"]:
                cached += f"; {t['reuse_unknown']} of the calls without a reported reuse"
            reuse = f"{t['reused']} of {prompt} prompt tokens from cache ({cached})"
        share = f"{t['accepted'] / t['decoded']:.0%}" if t["decoded"] else "-"
        # The acceptance rate first, as new-project's summary gives it: the decoded share
        # alone (19 %) stood a few lines from that summary's 45 % with nothing to relate them.
        drafts = (f"{t['accepted']} of {t['drafted']} drafted tokens accepted "
                  f"({t['accepted'] / t['drafted']:.0%}), {share} of the {t['decoded']} decoded"
                  if t["drafted"] else f"{t['decoded']} tokens decoded, no drafts")
        misses = f" · {t['reply_misses']} reply tokens re-prefilled" if t["reply_misses"] else ""
        return f"session: {t['turns']} model calls · {reuse} · {drafts}{misses}"

    def _show_call(self, name: str, args: Any, preview: str | None = None) -> None:
        if not isinstance(args, dict):
            args = {}
        if name == "bash":
            self.console.print(Text(f"$ {args.get('command', '')}", style="cyan"))
        elif name in DIFF_EDITS:
            verb = "edit" if name == "str_replace" else "insert into"
            self.console.print(Text(f"{verb} {args.get('path')}", style="cyan"))
            # Without a preview the edit does not apply (its result says why): what the model
            # wrote is shown unnumbered, since no line of the file matches it.
            self._show_diff(preview.splitlines()[2:] if preview is not None else (
                [f"-{line}" for line in str(args.get("old_str", "")).splitlines()]
                + [f"+{line}" for line in str(args.get("new_str", args.get("text", "")))
                   .splitlines()]))
        elif name == "create":
            self._show_create(args, preview)
        else:
            self.console.print(Text(f"→ {name} {_short(args)}", style="cyan"))

    def _show_create(self, args: dict[str, Any], preview: str | None) -> None:
        """A ``create``: a new file (no ``preview``) as one line; over a file that exists, said
        to replace it, with the diff: what the file loses must show, as for any edit."""
        # Counted like the tool's own result, so preview and result agree.
        head = f"create {args.get('path')} ({lines_label(str(args.get('file_text', '')))}"
        if preview is None:
            self.console.print(Text(f"{head})", style="cyan"))
        elif not preview:
            self.console.print(Text(f"{head}, the same content as the file)", style="cyan"))
        else:
            self.console.print(Text(f"{head}), replacing the existing file", style="cyan"))
            self._show_diff(preview.splitlines()[2:])

    def _show_diff(self, lines: list[str]) -> None:
        """An edit's diff lines (no file header), coloured, the first :data:`PREVIEW_LINES`
        of them and how many more there are."""
        for line in lines[:PREVIEW_LINES]:
            style = "green" if line.startswith("+") else "red" if line.startswith("-") \
                else "dim"
            self.console.print(Text(line, style=style))
        if len(lines) > PREVIEW_LINES:
            self.console.print(Text(f"… {len(lines) - PREVIEW_LINES} more lines of diff",
                                    style="dim"))

    def request_started(self, protocol: str, idle_timeout: float | None = None) -> None:
        """A model request was sent (``idle_timeout``: the seconds of silence after which the
        client gives up). A terminal shows a spinner with the time waited and the tokens
        received so far; elsewhere a progress line comes now and then; both say when the server
        has gone silent (:class:`RequestWatch`), since prefill of a long prompt can take
        minutes on a local GPU and a hung server looks the same until then."""
        self._protocol, self._streaming, self._started = protocol, False, time.monotonic()
        if self.json_mode:
            return
        watch = self._watch = RequestWatch(self._started, idle_timeout)
        if self.console.is_terminal:
            self._wait = Progress(SpinnerColumn(), TextColumn("{task.description}"),
                                  TimeElapsedColumn(), console=self.console, transient=True)
            self._wait.start()
            self._wait_task = self._wait.add_task(watch.status(), total=None)
        stop = self._stop_ticks = threading.Event()
        self._ticker = threading.Thread(target=self._tick, args=(watch, stop), daemon=True,
                                        name="request-progress")
        self._ticker.start()

    def _tick(self, watch: RequestWatch, stop: threading.Event) -> None:
        """Every :data:`TICK_S` until the request is done: refresh the spinner, print what
        ``watch`` says is due (progress lines only without a spinner and while no prose
        streams, since either already shows the reply coming)."""
        while not stop.wait(TICK_S):
            now = time.monotonic()
            wait, task = self._wait, self._wait_task
            if wait is not None and task is not None:
                wait.update(task, description=watch.status())
            line = watch.progress(now)
            if line and wait is None and not self._streaming:
                self.console.print(Text(line, style="dim"))
            warning = watch.silence(now)
            if warning:
                if self._streaming:
                    self.console.print()  # end the streamed line before the warning
                self.console.print(Text(warning, style="yellow"))

    def received(self, tokens: int) -> None:
        """A chunk of the reply arrived; ``tokens``: chunks with reply text so far."""
        if self._watch is not None:
            self._watch.chunk(tokens, time.monotonic())

    def stream(self, text: str) -> None:
        """Streamed reply text: prose is shown as it comes; json-protocol calls are not (the
        spinner stays, counting tokens)."""
        if self.json_mode or self._protocol == "json":
            return
        if self._wait is not None:
            self._wait.stop()
            self._wait = None
        self._streaming = True
        self.console.print(Text(text, style="dim"), end="")

    def request_done(self) -> None:
        if self._stop_ticks is not None and self._ticker is not None:
            self._stop_ticks.set()
            self._ticker.join()
            self._stop_ticks = self._ticker = None
        self._watch = None
        if self._wait is not None:
            self._wait.stop()
            self._wait = None
        if self._streaming:
            self.console.print()
            self._streaming = False

    def note(self, message: str) -> None:
        """A one-line status message (server loading, model download…), shown as it is:
        it may carry the model's words (a plan's summary), so brackets are not markup."""
        if not self.json_mode:
            self.console.print(Text(message, style="dim"))

    def told_model(self, text: str) -> None:
        """A message the agent sent the model in the user's role on its own (a format error's
        feedback, a protocol switch): its first line, and how many lines follow."""
        if self.json_mode:
            return  # the message event carries it
        first, *rest = text.strip().splitlines() or [""]
        more = f" (+{len(rest)} line{'s' if len(rest) > 1 else ''})" if rest else ""
        self.console.print(Text(f"told the model: {first}{more}", style="yellow"))

    def build_progress(self, step: str, done: int | None, total: int | None) -> None:
        """Engine build progress callback (see ``backend.engine.build.Progress``)."""
        if step.startswith(f"{LOG_STEP} "):
            # The first line names the real file: "<engine>" in its place left a user unable
            # to find it (a fresh-clone trial).
            self._build_log = step.removeprefix(f"{LOG_STEP} ")
            return
        if self.json_mode:
            return
        if not self.console.is_terminal:
            self._build_line(step, done, total, time.monotonic())
            return
        if self._progress is None:
            self.console.print(Text.assemble(("Building llama-server", "bold"),
                                             f" (first run only; full log: {self._build_log})"))
            self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                      TextColumn("{task.completed}/{task.total}"),
                                      TimeElapsedColumn(), console=self.console, transient=True)
            self._progress.start()
            self._task = self._progress.add_task(step, total=None)
        assert self._task is not None
        self._progress.update(self._task, description=step, completed=done or 0, total=total)
        if step == "install":
            self._progress.stop()

    def _build_line(self, step: str, done: int | None, total: int | None, now: float) -> None:
        """Build progress where a progress bar cannot show (output to a file or a pipe: a bar
        prints nothing there, and a ten-minute build looked hung): a line when the step
        changes and every :data:`PROGRESS_EVERY_S` seconds within one, and the total time at
        the end. ``now`` is ``time.monotonic()`` seconds."""
        if self._build_plain is None:
            # Fresh clones on 2 cores: 3 min 37 s and 3 min 46 s (AMD EPYC, 2026-12-05) to
            # 11 min (2026-12-02); "about 10 minutes" overstated the usual case.
            self.console.print(Text("Building llama-server (first run only, 3 to 11 minutes on 2 "
                                    f"cores; full log: {self._build_log})"))
            self._build_plain = (now, now - PROGRESS_EVERY_S, "")
        started, said, last = self._build_plain
        elapsed = f"{int(now - started) // 60} min {int(now - started) % 60:02d} s"
        if step == "install":
            self.console.print(f"build: done in {elapsed}")
        elif step != last or now - said >= PROGRESS_EVERY_S:
            count = f" {done}/{total}" if done is not None and total else ""
            self.console.print(f"build: {step}{count} ({elapsed})")
        else:
            return
        self._build_plain = (started, now, step)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
