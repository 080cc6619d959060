"""Session logs: ``<data>/sessions/<id>.jsonl`` (one event per line, flushed as it happens)
and ``<data>/sessions/index.jsonl`` (one line per session)."""

from __future__ import annotations

import json
import os
import secrets
import time
from pathlib import Path

from agent.events import Event, parse_event
from backend.home import home


def new_session_id() -> str:
    """A sortable, unique id: UTC time plus random hex (e.g. ``20261130-131600-a1b2c3``)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class SessionLog:
    """Append-only event log of one session; each event is fsynced so a crash loses nothing."""

    def __init__(self, session_id: str, task: str, workspace: Path):
        self.id = session_id
        folder = home().ensure().sessions
        self.path = folder / f"{session_id}.jsonl"
        with (folder / "index.jsonl").open("a", encoding="utf-8") as idx:
            idx.write(json.dumps({"id": session_id, "task": task, "workspace": str(workspace),
                                  "started": time.time()}) + "\n")

    def append(self, event: Event) -> None:
        """Write ``event`` as one JSON line and fsync."""
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(event.model_dump_json() + "\n")
            fh.flush()
            os.fsync(fh.fileno())


def read_events(path: Path) -> list[Event]:
    """All events of a session log; raises ``ValueError`` naming the bad line."""
    events = []
    for n, line in enumerate(path.read_text("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            events.append(parse_event(line))
        except ValueError as exc:
            raise ValueError(f"{path}:{n}: not a valid event: {exc}") from exc
    return events
