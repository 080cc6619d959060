"""Sessions that ran at once in one repository: each task's time and writes as its log tells
them, and what the other sessions of the same work tree did meanwhile (their changes are in
this session's checkpoints too)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import git

from agent.errors import UserError
from agent.events import Checkpoint, FileWrite, SessionStart, TaskStart, ToolCall
from agent.sessions.checkpoints.diffs import changed_files
from agent.sessions.checkpoints.restores import Overlap, log_path
from agent.sessions.log import read_events, session_path
from agent.sessions.record import FILE_TOOLS, READING_TOOLS, SessionRecord
from backend.home import home


@dataclass
class Work:
    """One task of a session as its log tells it: when it ran (from its start to its end
    checkpoint, or its last logged event where it has none), the files its file tools wrote
    (with when) and whether it ran a command that may write any file."""

    session_id: str
    task: int
    start: float
    end: float
    before: str | None = None
    after: str | None = None
    writes: list[tuple[str, float]] = field(default_factory=list)
    opaque: bool = False


def tasks_of(record: SessionRecord) -> list[Work]:
    """The tasks of ``record``, in order."""
    works: dict[int, Work] = {}
    current: Work | None = None
    for e in record.events:
        if isinstance(e, TaskStart):
            current = works[e.task] = Work(record.session_id, e.task, e.ts, e.ts)
            continue
        if current is None:
            continue
        if current.after is None:
            current.end = max(current.end, e.ts)
        if isinstance(e, Checkpoint) and e.task == current.task and e.kind in ("before",
                                                                                "after"):
            setattr(current, e.kind, e.sha)
        elif isinstance(e, FileWrite) and e.task in works:
            works[e.task].writes.append((e.path, e.ts))
        elif isinstance(e, ToolCall) and e.name not in READING_TOOLS | FILE_TOOLS:
            current.opaque = True
    return list(works.values())


def task_work(record: SessionRecord, task: int) -> Work | None:
    """Task ``task`` of ``record`` as :func:`tasks_of` reads it; None when the log has lost its
    start (a damaged line, skipped): then nothing tells when it ran."""
    return next((w for w in tasks_of(record) if w.task == task), None)


def overlap_of(repo: git.Repo, record: SessionRecord, mine: list[Work], start: float,
             end: float) -> Overlap:
    """What other sessions in the same repository did between ``start`` and ``end`` (the time
    of ``mine``, tasks of ``record``), from their logs."""
    overlap = Overlap(mine={path for w in mine for path, _ in w.writes},
                         mine_opaque=any(w.opaque for w in mine))
    for other in _neighbours(record, start, end):
        for work in tasks_of(other):
            if work.start > end or work.end < start:
                continue
            for path, ts in work.writes:
                if start <= ts <= end:
                    overlap.wrote.setdefault(path, set()).add(other.session_id)
            if work.opaque and work.before is not None:
                # Its commands may have changed anything its own checkpoints show changed.
                try:
                    changed = changed_files(repo, work.before, work.after)
                except UserError:
                    continue  # its checkpoints are gone (a pruned repository)
                for path in changed:
                    overlap.may_have.setdefault(log_path(path), set()).add(other.session_id)
    return overlap


def _neighbours(record: SessionRecord, start: float, end: float) -> list[SessionRecord]:
    """The other sessions of ``record``'s work tree whose logs may hold events between
    ``start`` and ``end``: indexed as started by then, and written to since (a log's time of
    last change bounds its events; most sessions of a repository are long over)."""
    index = home().sessions / "index.jsonl"
    try:
        lines = index.read_text("utf-8", errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        try:
            entry = json.loads(line)
            session_id, workspace = entry["id"], entry["workspace"]
            started = float(entry.get("started") or 0)
        except (ValueError, KeyError, TypeError):
            continue
        if session_id == record.session_id or workspace != record.start.workspace or \
                started > end or not isinstance(session_id, str):
            continue
        try:
            path = session_path(session_id)
            if os.stat(path).st_mtime < start:
                continue
            events = read_events(path, lenient=True)
        except (OSError, ValueError):
            continue  # not readable: nothing to go on
        starts = [e for e in events if isinstance(e, SessionStart)]
        if starts:
            other = SessionRecord(session_id, starts[0], events=events)
            found.append(other)
    return found
