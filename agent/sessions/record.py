"""What a session's log says about it: its tasks and their checkpoints, read back for undo,
diff, commit and resume; and the refs its checkpoints live at."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Literal

from agent.errors import UserError
from agent.events import Checkpoint, Event, SessionStart, TaskStart
from agent.protocols.base import FINAL_ANSWER
from agent.sessions.checkpoints.plumbing import checkpoint_ref
from agent.sessions.log import read_events, session_path
from skills.activation import TOOL_NAME as SKILL_TOOL

FILE_TOOLS = frozenset({"create", "str_replace", "insert", "undo_edit"})
"""The tools that write the file their ``path`` names: each write is logged as a
:class:`~agent.events.FileWrite`."""
READING_TOOLS = frozenset({"view", "grep", "glob", "bash_jobs", "bash_kill", SKILL_TOOL,
                           FINAL_ANSWER})
"""The tools that write no file. Any other call (bash, an MCP server's tool) may write any."""


@dataclass
class SessionRecord:
    """What a session log says about its repo and checkpoints."""

    session_id: str
    start: SessionStart
    tasks: dict[int, str] = field(default_factory=dict)
    checkpoints: dict[int, dict[str, str]] = field(default_factory=dict)
    """task → kind (before/after/undo) → commit sha."""
    events: list[Event] = field(default_factory=list)


def load_record(session_id: str, lenient: bool = False) -> SessionRecord:
    """Read a session's log; raises :class:`UserError` when it is missing or unreadable.

    A torn last line is skipped with a warning on stderr; ``lenient`` (undo, diff, commit:
    they need only the checkpoints) skips corrupt lines elsewhere too, with a warning each.
    """
    def warn(message: str) -> None:
        print(f"warning: {message}", file=sys.stderr)

    try:
        events = read_events(session_path(session_id), lenient=lenient, warn=warn)
    except (OSError, ValueError) as exc:
        raise UserError(str(exc)) from exc
    starts = [e for e in events if isinstance(e, SessionStart)]
    if not starts:
        raise UserError(f"session '{session_id}' has no session_start event; it cannot be used")
    record = SessionRecord(session_id, starts[0], events=events)
    for e in events:
        if isinstance(e, TaskStart):
            record.tasks[e.task] = e.text
        elif isinstance(e, Checkpoint):
            record.checkpoints.setdefault(e.task, {})[e.kind] = e.sha
    return record


def task_checkpoints(record: SessionRecord, task: int | None) -> tuple[int, str, str | None]:
    """Task ``task`` of ``record`` (its last task with a checkpoint when None) as (number,
    the sha of its before checkpoint, the sha of its after checkpoint or None while it has
    none). Raises :class:`UserError` when the session ran no task, has no checkpoint, or
    has no task ``task``."""
    done = [t for t, c in record.checkpoints.items() if "before" in c]
    if not done and not record.tasks:
        raise UserError(f"session '{record.session_id}' ran no task: there is nothing to undo "
                        "or compare")
    if not done:
        raise UserError(f"session '{record.session_id}' has no checkpoint to go back to "
                        "(it made no task in a git repo)")
    number = task if task is not None else max(done)
    if number not in record.checkpoints or "before" not in record.checkpoints[number]:
        raise UserError(f"session '{record.session_id}' has no task {number} "
                        f"(tasks with checkpoints: {', '.join(map(str, sorted(done)))})")
    marks = record.checkpoints[number]
    return number, marks["before"], marks.get("after")


def latest_snapshot(record: SessionRecord) -> str | None:
    """The sha of the session's latest snapshot of the working tree (an undo's too), or
    None when it has none."""
    marks = [e for e in record.events if isinstance(e, Checkpoint)]
    return marks[-1].sha if marks else None



def state_ref(session_id: str, task: int, kind: Literal["before", "after"]) -> str:
    """Where a task's staged state and stash entries are kept when it starts or ends: found by
    name, as the session log's checkpoint events hold snapshots of files only."""
    return checkpoint_ref(session_id, task, "index-stash" if kind == "before"
                             else f"{kind}-index-stash")
