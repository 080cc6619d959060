"""Session logs: ``<data>/sessions/<id>.jsonl`` (one event per line, flushed as it happens)
and ``<data>/sessions/index.jsonl`` (one line per session)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from agent.errors import UserError
from agent.events import Event, describe_invalid, parse_event
from backend.home import home, private_open


def new_session_id() -> str:
    """A sortable, unique id: UTC time plus random hex (e.g. ``20261130-131600-a1b2c3``)."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


class SessionLogError(UserError):
    """The session log cannot be written (a read-only file or folder, a full disk): the
    session stops rather than run on unrecorded, which would leave nothing to resume or
    undo from."""


def _unwritable(path: Path, exc: OSError) -> SessionLogError:
    return SessionLogError(f"cannot write the session log {path}: {exc.strerror or exc}; free "
                           "some space or make it writable, then run again (the files in the "
                           "workspace are as the task left them)")


class SessionLog:
    """Append-only event log of one session; each event is fsynced so a crash loses nothing.

    ``resume=True`` appends to an existing session's log (no new index entry), after setting
    aside a last line a crash cut (``set_aside`` names the side file then, else None).
    """

    def __init__(self, session_id: str, task: str, workspace: Path, resume: bool = False):
        self.id = session_id
        folder = home().ensure().sessions
        self.path = folder / f"{session_id}.jsonl"
        self.set_aside: Path | None = None
        # Checked before the task starts: a log that cannot be written was found only at
        # the first event, an internal error (exit 4) in the middle of a turn.
        target = self.path
        try:
            if resume:
                self.set_aside = mend_torn_tail(self.path)
            else:
                target = folder / "index.jsonl"
                _append_index(target, {"id": session_id, "task": task,
                                       "workspace": str(workspace), "started": time.time()})
                target = self.path
            with private_open(self.path, "a", encoding="utf-8"):
                pass
        except OSError as exc:
            raise _unwritable(target, exc) from exc

    def append(self, event: Event) -> None:
        """Write ``event`` as one JSON line and fsync; raises :class:`SessionLogError` when
        the log cannot be written."""
        try:
            with private_open(self.path, "a", encoding="utf-8") as fh:
                fh.write(event.model_dump_json() + "\n")
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:
            raise _unwritable(self.path, exc) from exc


def _append_index(index: Path, entry: dict[str, object]) -> None:
    """Add ``entry`` to the sessions index as one line, on a line of its own.

    A last line cut mid-write (a crash, a full disk) has no newline: an entry appended right
    after it was glued onto it, and the two made one unreadable line, so the new session
    vanished from `agent sessions` and a plain `agent undo` picked the one before. So a newline
    goes first when the file does not end with one (the fragment stays one unreadable line,
    which readers skip). The line is one ``write`` with ``O_APPEND`` (no buffered halves for a
    session starting at once to land between) and is fsynced: once per session, cheap."""
    line = json.dumps(entry) + "\n"
    with private_open(index, "a+b", buffering=0) as fh:
        size = fh.seek(0, os.SEEK_END)
        if size:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":
                line = "\n" + line  # at worst (a race) an empty line, which readers skip
        fh.write(line.encode("utf-8"))
        os.fsync(fh.fileno())


_INDEX_ENTRY = re.compile(r'(?=\{"id": )')
"""Where an index entry starts (``json.dumps`` of a dict whose first key is ``id``; a quote
inside a value is escaped, so this never matches within an entry)."""


def _index_entries(line: str) -> list[object]:
    """The index entries of one line of the index: one, or none for a line that is not JSON.

    An index written before :func:`_append_index` began entries on a fresh line may hold an
    entry glued onto a torn one (``{"id": "2026{"id": ...}``); each entry found in such a line
    is read on its own, so the session after a crash is still listed and picked."""
    try:
        return [json.loads(line)]
    except ValueError:
        pass
    entries = []
    for piece in _INDEX_ENTRY.split(line):
        with contextlib.suppress(ValueError):
            entries.append(json.loads(piece))
    return entries


def mend_torn_tail(path: Path) -> Path | None:
    """Move a torn last line (no newline at its end: the process died mid-write) of the log at
    ``path`` into ``<log>.torn`` and cut it from the log, so the next event starts a line of its
    own instead of being glued onto the fragment. Returns the side file, or None when the log
    ends cleanly (or does not exist). The fragment is kept first, then cut: a crash in between
    keeps it twice, never loses it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    if not data or data.endswith(b"\n"):
        return None
    cut = data.rfind(b"\n") + 1
    side = path.with_name(path.name + ".torn")
    with private_open(side, "ab") as fh:
        fh.write(data[cut:] + b"\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.truncate(path, cut)
    return side


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
        except ValidationError as exc:
            if n == len(lines) and torn:
                if warn:
                    warn(f"{path}:{n}: skipped the last line, cut off mid-write (the session "
                         "stopped while writing it)")
                continue
            why = describe_invalid(exc)
            if not lenient:
                raise ValueError(f"{path}:{n}: not a valid event: {why}. Resuming needs every "
                                 "line of the log; `agent undo` and `agent diff` skip this one "
                                 "and still work") from exc
            if warn:
                warn(f"{path}:{n}: skipped a line that is not a valid event: {why}; undo and "
                     "diff use the rest of the log")
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
    ended: str = "no_task"
    """How the last task ended: done, stopped, interrupted, failed, no_end (nothing recorded:
    killed, or still running), no_task, empty (opened and left without a task: the log holds
    only its start; :func:`list_sessions` leaves these out), or unknown (the log is damaged,
    empty or unreadable)."""
    end_detail: str = "no task run"
    """The same as a phrase for people (why it stopped, the error)."""


STOPPED = {
    "max_steps": "the step limit ran out",
    "max_time": "the time limit ran out",
    "repeated_call": "the model repeated its calls",
    "format_errors": "the model wrote malformed tool calls",
    "length": "a reply was cut at the token limit",
    "approval_needed": "a call needed approval without a terminal",
    "nothing_done": "no tool call of the task succeeded",
    "nothing_changed": "the task changed no file and ran no command",
    "broken_files": "a file the task edited does not parse",
    "check_failed": "the task's last check failed",
}
"""Why a task stopped, per :class:`agent.events.FinalAnswer` reason, for ``agent sessions``."""


_START_EVENTS = frozenset({"session_start", "protocol"})
"""What every session logs as it opens, before any task (with the system message)."""


def _ending(lines: list[str], torn: bool) -> tuple[str, str, int, int]:
    """(ended, end_detail, steps, tasks) from a session log's lines. Only the event types and
    a few fields are read (``json.loads``, no model), so listing many long logs stays quick."""
    steps = tasks = 0
    ended, detail = "no_task", "no task run"
    bare = True  # only what a session logs as it opens, so far
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
            kind = event["type"]
        except (ValueError, TypeError, KeyError):
            if n == len(lines) and torn:
                bare = False  # it died writing something: maybe its first task
                continue  # cut off mid-write: the normal trace of a crash, not damage
            return "unknown", f"unknown (line {n} of the log is damaged)", steps, tasks
        bare = bare and (kind in _START_EVENTS or (
            kind == "message" and isinstance(event.get("message"), dict)
            and event["message"].get("role") == "system"))
        if kind == "model_turn":
            steps += 1
        elif kind == "task_start":
            tasks += 1
            ended, detail = "no_end", "no end recorded (killed, or still running)"
        elif kind == "checkpoint" and event.get("kind") == "after" and ended == "no_end":
            # The task's `finally` ran but no answer came: an error ended it.
            ended, detail = "failed", "failed (an error ended the task)"
        elif kind == "error":
            message = " ".join(str(event.get("message", "")).split())[:120]
            ended, detail = "failed", f"failed: {message}"
        elif kind == "final_answer":
            reason = str(event.get("reason"))
            if reason == "done":
                ended, detail = "done", "done"
            elif reason == "interrupted":
                cause = " ".join(str(event.get("text") or "").split())[:20]
                ended, detail = "interrupted", f"interrupted ({cause or 'Ctrl-C'})"
            else:
                ended, detail = "stopped", f"stopped: {STOPPED.get(reason, reason)}"
    if bare:
        ended, detail = "empty", "empty (left without a task)"
    return ended, detail, steps, tasks


def summarise(entry: dict[str, object], path: Path) -> SessionSummary:
    """The summary of one session from its index ``entry`` and its log at ``path``; a log that
    cannot be read, is empty or is damaged gives ``ended`` unknown, never an exception."""
    try:
        started = float(entry.get("started") or 0)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        started = 0.0
    summary = SessionSummary(str(entry["id"]), str(entry.get("task") or ""),
                             str(entry.get("workspace") or ""), started, 0, 0)
    try:
        data = path.read_bytes()
    except OSError as exc:
        summary.ended = "unknown"
        summary.end_detail = f"unknown (the log cannot be read: {exc.strerror or exc})"
        return summary
    if not data:
        # Every session logs its start as it opens: a log of 0 bytes stopped before that (a
        # crash, a full disk). Not a chat left without a task (hidden as empty): damage.
        summary.ended = "unknown"
        summary.end_detail = "unknown (the log is empty: the session stopped before writing " \
            "its start)"
        return summary
    lines = data.decode("utf-8", errors="replace").split("\n")
    torn = not data.endswith(b"\n") and lines[-1].strip() != ""
    summary.ended, summary.end_detail, summary.steps, summary.tasks = _ending(lines, torn)
    if summary.ended == "empty" and summary.task:
        # Asked for (new-project indexes its description) but never started: not clutter.
        summary.ended, summary.end_detail = "no_task", "no task run"
    if not summary.task:
        # Sessions started by `agent chat` are indexed before their first task.
        for line in lines:
            if '"type":"task_start"' in line:
                with contextlib.suppress(ValueError, AttributeError):
                    summary.task = str(json.loads(line).get("text", ""))
                break
    return summary


def session_path(session_id: str) -> Path:
    """The log of ``session_id``; raises ``FileNotFoundError`` naming the id."""
    if not _SESSION_ID.fullmatch(session_id):
        # Ids are made by new_session_id; anything else (a path, "..") names no session.
        raise FileNotFoundError(f"no session '{session_id}' (see `agent sessions`)")
    path = home().sessions / f"{session_id}.jsonl"
    if path.exists() and not path.is_file():
        # `agent sessions` lists it as unknown: "no session" contradicted that.
        raise FileNotFoundError(f"the log of session '{session_id}' ({path}) is not a file; "
                                "it cannot be read")
    if not path.is_file():
        raise FileNotFoundError(f"no session '{session_id}' (see `agent sessions`)")
    return path


_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def list_sessions() -> list[SessionSummary]:
    """Every indexed session with a log, newest first; corrupt index lines are skipped (an
    entry an older version glued onto a torn line is still read), and a session whose log is
    damaged, empty or unreadable is listed with ``ended`` unknown.

    An empty session (a chat opened and left without a task: its log holds only its start)
    is left out: it is clutter in `agent sessions`, and nothing to resume, undo or compare.
    Its log stays, so its id still names it (`agent resume ID`, the MCP server's tools)."""
    index = home().sessions / "index.jsonl"
    if not index.is_file():
        return []
    found: dict[str, SessionSummary] = {}
    lines = index.read_text("utf-8", errors="replace").splitlines()
    for entry in (e for line in lines for e in _index_entries(line)):
        session_id = entry.get("id") if isinstance(entry, dict) else None
        if not isinstance(session_id, str) or "/" in session_id:
            continue  # not an id this product writes; never a path to follow
        path = home().sessions / f"{session_id}.jsonl"
        if os.path.lexists(path):
            found[session_id] = summarise(entry, path)
    return sorted((s for s in found.values() if s.ended != "empty"), key=lambda s: s.started,
                  reverse=True)
