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
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from agent.config import load_settings
from agent.errors import UserError, write_crash_log
from agent.events import Event
from agent.newproject import new_project
from agent.sessions.repo import RepoSession
from agent.ui import Reporter
from backend import secret_store


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


def send(message: dict[str, Any]) -> None:
    """Write one protocol line to stdout."""
    sys.stdout.write(json.dumps(message, ensure_ascii=False) + "\n")
    sys.stdout.flush()


class PipeReporter(Reporter):
    """Events and notes as protocol lines; nothing is drawn."""

    def __init__(self) -> None:
        super().__init__(json_mode=True)
        self._last_step = ""

    def event(self, event: Event) -> None:
        sys.stdout.write(event.model_dump_json() + "\n")
        sys.stdout.flush()

    def note(self, message: str) -> None:
        send({"type": "note", "text": message})

    def build_progress(self, step: str, done: int | None, total: int | None) -> None:
        # One line per build stage, not one per compiled file.
        if step != self._last_step:
            self._last_step = step
            send({"type": "note", "text": f"building llama-server: {step}"})

    def request_started(self, protocol: str, idle_timeout: float | None = None) -> None:
        """Nothing to draw."""

    def stream(self, text: str) -> None:
        """Streamed text is not forwarded: the events carry each turn."""

    def received(self, tokens: int) -> None:
        """Nothing to draw."""

    def request_done(self) -> None:
        """Nothing to draw."""


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
    except UserError as exc:
        send({"type": "failed", "message": str(exc)})
        return 3
    except Exception as exc:
        crash = write_crash_log(exc)
        send({"type": "failed", "message": f"{type(exc).__name__}: {exc} (crash log: {crash})"})
        return 4


if __name__ == "__main__":
    sys.exit(main())
