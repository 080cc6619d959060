"""The process that runs one MCP-started task: ``python -m agent.mcp_server.worker``.

A task runs in its own process so that cancelling it is exactly a Ctrl-C (SIGINT): the loop
answers the pending call, the bash tool kills its process group, the after-checkpoint is taken
and background jobs are stopped, the same as in a terminal.

Wire protocol (JSON, one object per line):

- stdin, first line: the :class:`WorkerSpec`; later lines: ``{"answer": "y" | reason}``, one per
  approval request.
- stdout: every session event (:mod:`agent.events`), plus ``{"type": "note", "text"}``
  (backend progress), ``{"type": "approval_request", "prompt"}``, and finally
  ``{"type": "done", ...}`` or ``{"type": "failed", "message"}``.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from agent.config import load_settings
from agent.errors import UserError, host_text, write_crash_log
from agent.events import Event
from agent.newproject import new_project
from agent.sessions.repo import RepoSession
from agent.ui import TICK_S, Reporter, RequestWatch
from backend import secret_store
from backend.errors import StatedError


class WorkerSpec(BaseModel):
    """What one worker does."""

    kind: Literal["run_task", "new_project"]
    session_id: str
    text: str
    """The task, or the project's description."""
    path: str
    """The repository (run_task) or the new project's directory (new_project)."""
    approval: Literal["ask", "auto-edit", "full-auto"] = "full-auto"
    settings: dict[str, Any] = {}
    """Setting overrides given to ``agent mcp serve`` (base_url, preset, max_steps…)."""


_WRITE = threading.Lock()
"""Protocol lines come from the task's thread and from the request-progress ticker."""


def _write(line: str) -> None:
    with _WRITE:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def send(message: dict[str, Any]) -> None:
    """Write one protocol line to stdout."""
    _write(json.dumps(message, ensure_ascii=False))


class PipeReporter(Reporter):
    """Events and notes as protocol lines; nothing is drawn. While a model request runs, the
    progress and silence lines a terminal would show (:class:`agent.ui.RequestWatch`) go out as
    notes, so an MCP host sees a long prefill or a hung server while it lasts."""

    def __init__(self) -> None:
        super().__init__(json_mode=True)
        self._last_step = ""
        self._request: tuple[RequestWatch, threading.Event, threading.Thread] | None = None

    def event(self, event: Event) -> None:
        _write(event.model_dump_json())

    def note(self, message: str) -> None:
        send({"type": "note", "text": message})

    def build_progress(self, step: str, done: int | None, total: int | None) -> None:
        # One line per build stage, not one per compiled file.
        if step != self._last_step:
            self._last_step = step
            send({"type": "note", "text": f"building llama-server: {step}"})

    def request_started(self, protocol: str, idle_timeout: float | None = None) -> None:
        """Start sending the request's progress and silence lines as notes."""
        self.request_done()
        watch, stop = RequestWatch(time.monotonic(), idle_timeout), threading.Event()
        ticker = threading.Thread(target=self._tick, args=(watch, stop), daemon=True,
                                  name="request-progress")
        self._request = (watch, stop, ticker)
        ticker.start()

    @staticmethod
    def _tick(watch: RequestWatch, stop: threading.Event) -> None:
        while not stop.wait(TICK_S):
            now = time.monotonic()
            for line in (watch.progress(now), watch.silence(now)):
                if line:
                    send({"type": "note", "text": line})

    def stream(self, text: str) -> None:
        """Streamed text is not forwarded: the events carry each turn."""

    def received(self, tokens: int) -> None:
        """A chunk arrived (``tokens`` so far): the server is not silent."""
        if self._request is not None:
            self._request[0].chunk(tokens, time.monotonic())

    def request_done(self) -> None:
        """Stop the request's progress lines."""
        if self._request is not None:
            _, stop, ticker = self._request
            stop.set()
            ticker.join()
            self._request = None


def ask_parent(prompt: str) -> str:
    """Relay an approval question to the MCP server and wait for its answer."""
    send({"type": "approval_request", "prompt": prompt})
    line = sys.stdin.readline()
    if not line:
        return "no: the MCP server went away before answering"
    return str(json.loads(line).get("answer", "no"))


def run(spec: WorkerSpec) -> dict[str, Any]:
    """Run the spec's task; returns the ``done`` message."""
    path = Path(spec.path)
    reporter = PipeReporter()
    if spec.kind == "new_project":
        settings = load_settings(cli={**spec.settings, "approval": "full-auto"})
        result = new_project(spec.text, path, settings, reporter, session_id=spec.session_id)
        return {"type": "done", "reason": result.loop.reason, "text": result.loop.text,
                "steps": result.loop.steps, "tests": result.tests.status,
                "tests_detail": result.tests.detail, "test_runner": result.tests.runner,
                "commit": result.commit, "files": result.files, "created": result.created,
                "recipe": result.recipe.name if result.recipe else None,
                "unwritten": result.unwritten}
    settings = load_settings(project=path, cli={**spec.settings, "approval": spec.approval})
    session = RepoSession(settings, path, reporter, ask=ask_parent, interactive=True,
                          session_id=spec.session_id)
    try:
        loop = session.run_task(spec.text)
    finally:
        session.close()
    return {"type": "done", "reason": loop.reason, "text": loop.text, "steps": loop.steps}


def main() -> int:
    """Read the spec, run it, report; the exit code is 0 when a ``done`` line was sent."""
    secret_store.start()  # takes the store handed down by `agent mcp serve`
    try:
        try:
            spec = WorkerSpec.model_validate_json(sys.stdin.readline())
        except ValidationError as exc:
            # Only `agent mcp serve` writes this line; a broken one means a mismatched version.
            raise UserError("the task spec on stdin is not one this version reads "
                            f"({exc.error_count()} problem(s), first: "
                            f"{exc.errors()[0]['msg']}); restart the MCP server") from None
        send(run(spec))
        return 0
    except KeyboardInterrupt:
        send({"type": "failed", "message": "cancelled before the task started"})
        return 130
    except StatedError as exc:
        # As the CLI says them: an unknown preset or an unreachable server is one line, not
        # a crash (a field trial's host read "UnknownPreset: … (crash log: …)").
        tail = "" if exc.plain else f" (details: {write_crash_log(exc)})"
        send({"type": "failed", "message": f"{host_text(exc)}{tail}"})
        return 3
    except Exception as exc:
        crash = write_crash_log(exc)
        send({"type": "failed", "message": f"{type(exc).__name__}: {exc} (crash log: {crash})"})
        return 4


if __name__ == "__main__":
    sys.exit(main())
