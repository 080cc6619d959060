"""Session logs: ``<data>/sessions/<id>.jsonl`` (one event per line, flushed as it happens)
and ``<data>/sessions/index.jsonl`` (one line per session)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent.events import Event, parse_event
from backend.home import home, private_open


def new_session_id() -> str:
    """A sortable, unique id: UTC time plus random hex (e.g. ``20261130-131600-a1b2c3``)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class SessionLog:
    """Append-only event log of one session; each event is fsynced so a crash loses nothing.

    ``resume=True`` appends to an existing session's log (no new index entry).
    """

    def __init__(self, session_id: str, task: str, workspace: Path, resume: bool = False):
        self.id = session_id
        folder = home().ensure().sessions
        self.path = folder / f"{session_id}.jsonl"
        if resume:
            return
        with private_open(folder / "index.jsonl", "a", encoding="utf-8") as idx:
            idx.write(json.dumps({"id": session_id, "task": task, "workspace": str(workspace),
                                  "started": time.time()}) + "\n")

    def append(self, event: Event) -> None:
        """Write ``event`` as one JSON line and fsync."""
        with private_open(self.path, "a", encoding="utf-8") as fh:
            fh.write(event.model_dump_json() + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def read_events(path: Path, lenient: bool = False,
                warn: Callable[[str], None] | None = None) -> list[Event]:
    """All events of a session log.

    A torn last line (no newline at its end: the process died mid-write, the normal result of a
    crash) is skipped, said through ``warn``. A bad line elsewhere raises ``ValueError`` naming
    it, or with ``lenient`` is skipped and said too (undo and diff need only the checkpoints).
    Raises ``OSError`` when the file cannot be read.
    """
    data = path.read_bytes()
    lines = data.decode("utf-8", errors="replace").split("\n")
    torn = not data.endswith(b"\n") and lines[-1].strip() != ""
    events = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            events.append(parse_event(line))
        except ValueError as exc:
            if n == len(lines) and torn:
                if warn:
                    warn(f"{path}:{n}: skipped the last line, cut off mid-write (the session "
                         "stopped while writing it)")
                continue
            if not lenient:
                raise ValueError(f"{path}:{n}: not a valid event: {exc}") from exc
            if warn:
                warn(f"{path}:{n}: skipped a line that is not a valid event ({exc})")
    return events


@dataclass
class SessionSummary:
    """One line of ``agent sessions``."""

    id: str
    task: str
    workspace: str
    started: float
    """Unix time, seconds."""
    steps: int
    tasks: int


def session_path(session_id: str) -> Path:
    """The log of ``session_id``; raises ``FileNotFoundError`` naming the id."""
    path = home().sessions / f"{session_id}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no session '{session_id}' (see `agent sessions`)")
    return path


def list_sessions() -> list[SessionSummary]:
    """Every indexed session with a log, newest first; corrupt index lines are skipped."""
    index = home().sessions / "index.jsonl"
    if not index.is_file():
        return []
    found: dict[str, SessionSummary] = {}
    for line in index.read_text("utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
            path = home().sessions / f"{entry['id']}.jsonl"
        except (ValueError, KeyError, TypeError):
            continue
        if not path.is_file():
            continue
        steps = tasks = 0
        task = str(entry.get("task", ""))
        for raw in path.read_text("utf-8", errors="replace").splitlines():
            if '"type":"model_turn"' in raw:
                steps += 1
            elif '"type":"task_start"' in raw:
                tasks += 1
                if not task:
                    with contextlib.suppress(ValueError, AttributeError):
                        task = str(json.loads(raw).get("text", ""))
        found[entry["id"]] = SessionSummary(entry["id"], task,
                                            str(entry.get("workspace", "")),
                                            float(entry.get("started", 0)), steps, tasks)
    return sorted(found.values(), key=lambda s: s.started, reverse=True)
