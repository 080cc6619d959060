"""Repo edit sessions: ``agent run`` / ``chat`` / ``resume`` over one event log, with a git
checkpoint before and after every task, and undo / diff / commit from those checkpoints.

Undo and diff need no model server: they read the session log and the private refs only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import git

from agent.config import Settings
from agent.context import DEFAULT_N_CTX, ContextKeeper
from agent.errors import UsageError, UserError
from agent.events import (
    Checkpoint,
    Compaction,
    ErrorEvent,
    Event,
    FileWrite,
    Message,
    ModelTurn,
    ProjectPlan,
    SessionStart,
    TaskStart,
    ToolCall,
    ToolResult,
)
from agent.loop import Agent, Limits, LoopResult
from agent.prompts import system_prompt
from agent.protocols.base import FINAL_ANSWER, tools_with_final
from agent.protocols.calls import RESULT_PREFIX
from agent.runtime import Backend, choose_protocol, connect, record_speculation, renders_tool_role
from agent.sessions import checkpoints as cp
from agent.sessions.approval import make_approver
from agent.sessions.instructions import load_instructions
from agent.sessions.log import SessionLog, new_session_id, read_events, session_path
from agent.sessions.named_files import with_named_files
from agent.sessions.slots import server_slot
from agent.ui import Reporter
from backend.home import home
from skills.activation import TOOL_NAME as SKILL_TOOL
from skills.session import UnknownSkill, attach_skills, find_skills
from tools import reaper
from tools.base import ToolContext
from tools.mcp.setup import add_mcp_tools, start_servers
from tools.registry import Registry, default_registry
from tools.secretfiles import holds_secrets
from tools.workspace import PathRefused, Workspace, display_name

INTERRUPTED = "interrupted: the session ended before this call finished; check its effects"
FILE_TOOLS = frozenset({"create", "str_replace", "insert", "undo_edit"})
"""The tools that write the file their ``path`` names: each write is logged as a
:class:`~agent.events.FileWrite`."""
READING_TOOLS = frozenset({"view", "grep", "glob", "bash_jobs", "bash_kill", SKILL_TOOL,
                           FINAL_ANSWER})
"""The tools that write no file. Any other call (bash, an MCP server's tool) may write any."""
NOT_RUN = "not run: the session ended before this call started"
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


def _task_checkpoints(record: SessionRecord, task: int | None) -> tuple[int, str, str | None]:
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


def _latest_snapshot(record: SessionRecord) -> str | None:
    """The sha of the session's latest snapshot of the working tree (an undo's too), or
    None when it has none."""
    marks = [e for e in record.events if isinstance(e, Checkpoint)]
    return marks[-1].sha if marks else None


def _repo_of(record: SessionRecord) -> git.Repo:
    if not record.start.repo and any(isinstance(e, ProjectPlan) for e in record.events):
        # new-project starts before its `git init`: "did not run in a git repo" was wrong.
        raise UserError(f"session '{record.session_id}' created the project in "
                        f"{record.start.workspace}: there is no state before it to go back to "
                        "or compare with (its commit holds the whole project; remove the "
                        "folder to undo it)")
    if not record.start.repo:
        raise UserError(f"session '{record.session_id}' did not run in a git repo")
    return cp.open_repo(Path(record.start.repo))


def _state_ref(session_id: str, task: int, kind: Literal["before", "after"]) -> str:
    """Where a task's staged state and stash entries are kept when it starts or ends: found by
    name, as the session log's checkpoint events hold snapshots of files only."""
    return cp.checkpoint_ref(session_id, task, "index-stash" if kind == "before"
                             else f"{kind}-index-stash")


def undo_task(session_id: str, task: int | None = None, force: bool = False,
              log: SessionLog | None = None) -> cp.RestorePlan:
    """Restore the files a task changed to their state before it (the last task by default);
    run again right after, it undoes that undo (the files come back as the agent left them).

    The current tree is snapshotted first, so every undo can itself be undone. An undo also
    stores again the stash entries the task dropped and puts back the staged state it changed
    (see :func:`~agent.sessions.checkpoints.restore_git_state`); undoing the undo leaves both
    alone, so the stash entries stay and no one's staging is lost. Raises
    :class:`UserError` (including ``RestoreConflict`` when the user changed those files after the
    agent, unless ``force``).
    """
    record = load_record(session_id, lenient=True)
    repo = _repo_of(record)
    number, before, after = _task_checkpoints(record, task)
    marks = [e for e in record.events if isinstance(e, Checkpoint) and e.task == number
             and e.kind in ("undo", "redo")]
    kind: Literal["undo", "redo"] = "undo"
    since = after or before
    if marks and marks[-1].kind == "undo":
        # Undo the undo: back to the snapshot taken just before it.
        kind, before, after = "redo", marks[-1].sha, before
        since = before
    ref = cp.checkpoint_ref(session_id, number, f"{kind}-{len(marks) + 1}")
    # Without an end checkpoint (the run was killed) only the log tells which files are the
    # agent's: those its file tools wrote, while they still hold what it left.
    wrote = {e.path: e.digest for e in record.events
             if isinstance(e, FileWrite) and e.task == number} if after is None else None
    # Another session that ran at the same time left its changes in this task's checkpoints.
    overlap = None
    work = _task_work(record, number)
    if kind == "undo" and work is not None:
        overlap = _overlap(repo, record, [work], work.start, work.end)
    try:
        plan = cp.restore(repo, before, after, ref, force=force, since=since, agent_wrote=wrote,
                          overlap=overlap)
    except cp.RestoreConflict as exc:  # the session's id, for the advice an MCP host gets
        raise cp.RestoreConflict(exc.conflicts, session_id, exc.unended, exc.others) from None
    sha = repo.git.rev_parse(ref)
    (log or SessionLog(session_id, "", Path(record.start.workspace), resume=True)).append(
        Checkpoint(session_id=session_id, task=number, kind=kind, ref=ref, sha=sha))
    if kind == "undo":
        plan.commits_since = cp.commits_since(repo, before)
        # After the log line: the files are back whatever happens here, and a failure is
        # reported in the plan rather than raised.
        cp.restore_git_state(repo, _state_ref(session_id, number, "before"),
                             _state_ref(session_id, number, "after"), plan,
                             head=cp.parent_or_empty(repo, before))
    return plan


def diff_task(session_id: str) -> str:
    """Unified diff of what the session's last task changed: from its starting checkpoint to
    the one taken when it ended (to now while it has none). What a host reads as the task's
    result: a diff to now showed the user's later edits, another task's, or nothing once
    undone (a field trial). Files another session alone changed meanwhile are left out."""
    record = load_record(session_id, lenient=True)
    number, before, after = _task_checkpoints(record, None)
    repo = _repo_of(record)
    work = _task_work(record, number)
    overlap = _overlap(repo, record, [work], work.start, work.end) if work else cp.Overlap()
    theirs: dict[str, list[str]] = {}
    if overlap.wrote or overlap.may_have:
        theirs, _ = overlap.split(cp.changed_files(repo, before, after))
    return cp.diff(repo, before, after, leave_out=list(theirs))


def diff_session(session_id: str, task: int | None = None,
                 notes: list[str] | None = None) -> str:
    """Unified diff from the task's starting checkpoint (first task by default) to now.

    A file another session alone changed since (its file tools wrote it; this session's did
    not, and it ran no command) is left out, and one both may have changed is kept; ``notes``
    gets a line on each (a field trial: a session's diff showed another's change as its
    own)."""
    record = load_record(session_id, lenient=True)
    repo = _repo_of(record)
    first = min(t for t, c in record.checkpoints.items() if "before" in c) \
        if task is None and record.checkpoints else task
    number, before, _ = _task_checkpoints(record, first)
    # Now as the session's latest snapshot would see it: what any of its tasks found ignored
    # at its start is left out (a secret a task un-ignored is no new file of the session).
    since = _latest_snapshot(record)
    works = [w for w in _works(record) if w.task >= number]
    overlap = _overlap(repo, record, works, works[0].start if works else time.time(),
                       time.time())
    theirs: dict[str, list[str]] = {}
    shared: dict[str, list[str]] = {}
    if overlap.wrote or overlap.may_have:
        theirs, shared = overlap.split(cp.changed_files(repo, before, since=since))
    if notes is not None:
        notes += [f"note: left out {display_name(p)}, changed by {_sessions(ids)}, not by this "
                  "one" for p, ids in theirs.items()]
        notes += [f"note: {display_name(p)} was changed by {_sessions(ids)} too, which ran at "
                  "the same time" for p, ids in shared.items()]
    return cp.diff(repo, before, since=since, leave_out=list(theirs), notes=notes)


def _sessions(ids: Sequence[str]) -> str:
    return ("session " if len(ids) == 1 else "sessions ") + ", ".join(ids)


@dataclass
class _Work:
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


def _works(record: SessionRecord) -> list[_Work]:
    """The tasks of ``record``, in order."""
    works: dict[int, _Work] = {}
    current: _Work | None = None
    for e in record.events:
        if isinstance(e, TaskStart):
            current = works[e.task] = _Work(record.session_id, e.task, e.ts, e.ts)
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


def _task_work(record: SessionRecord, task: int) -> _Work | None:
    """Task ``task`` of ``record`` as :func:`_works` reads it; None when the log has lost its
    start (a damaged line, skipped): then nothing tells when it ran."""
    return next((w for w in _works(record) if w.task == task), None)


def _overlap(repo: git.Repo, record: SessionRecord, mine: list[_Work], start: float,
             end: float) -> cp.Overlap:
    """What other sessions in the same repository did between ``start`` and ``end`` (the time
    of ``mine``, tasks of ``record``), from their logs."""
    overlap = cp.Overlap(mine={path for w in mine for path, _ in w.writes},
                         mine_opaque=any(w.opaque for w in mine))
    for other in _neighbours(record, start, end):
        for work in _works(other):
            if work.start > end or work.end < start:
                continue
            for path, ts in work.writes:
                if start <= ts <= end:
                    overlap.wrote.setdefault(path, set()).add(other.session_id)
            if work.opaque and work.before is not None:
                # Its commands may have changed anything its own checkpoints show changed.
                try:
                    changed = cp.changed_files(repo, work.before, work.after)
                except UserError:
                    continue  # its checkpoints are gone (a pruned repository)
                for path in changed:
                    overlap.may_have.setdefault(cp.log_path(path), set()).add(other.session_id)
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


class RepoSession:
    """A live session in a repository: connected backend, agent, log and checkpoints."""

    def __init__(self, settings: Settings, path: Path, reporter: Reporter, *,
                 no_git: bool = False, resume: str | None = None, protocol: str | None = None,
                 ask: Callable[[str], str] | None = None, interactive: bool | None = None,
                 session_id: str | None = None, skills: Sequence[str] = ()):
        """``session_id`` names a new session in advance (the MCP server hands it out before
        the backend is ready); by default a fresh one is made. ``skills`` are activated at the
        start of the first task (``agent run --skill``); raises :class:`UsageError` when one is
        not installed."""
        self.settings, self.reporter = settings, reporter
        cwd = path.expanduser().resolve()
        self.repo = None if no_git else cp.open_repo(cwd)
        root = Path(self.repo.working_tree_dir) if self.repo is not None else cwd
        record = load_record(resume) if resume else None
        try:
            found = find_skills(root, skills)
        except UnknownSkill as exc:
            raise UsageError(str(exc)) from exc
        self.backend: Backend = connect(settings, reporter)
        client = self.backend.client
        workspace = Workspace(root)
        self.workspace = workspace
        self._calls: dict[str, ToolCall] = {}
        """File tool calls that have not answered yet, by call id (see :meth:`emit`)."""
        self.registry: Registry = default_registry(workspace)
        self.skills = attach_skills(self.registry, ToolContext(workspace), found,
                                    client.n_ctx() or settings.ctx_size or DEFAULT_N_CTX,
                                    lambda text: len(client.tokenize(text)), skills)
        self.forced_skills = list(skills)
        self.last_snapshot: str | None = None
        """The session's latest checkpoint (its sha), the next one is taken since."""
        self._said_unreadable: set[str] = set()
        if record is not None:
            self.id = record.session_id
            protocol, auto_switch = choose_protocol(protocol, client) if protocol \
                else (record.start.protocol, False)
            self.tasks = max(record.tasks, default=0)
            self.last_snapshot = _latest_snapshot(record)
        else:
            self.id = session_id or new_session_id()
            protocol, auto_switch = choose_protocol(protocol or settings.tool_protocol, client)
            self.tasks = 0
        # Before any tool process starts: their markers name the session (`agent resume`).
        reaper.set_session(self.id)
        self.log = SessionLog(self.id, "", root, resume=record is not None)
        if self.log.set_aside is not None:
            self.warn(f"the log's cut-off last line was moved to {self.log.set_aside}")
        self.mcp = start_servers(root, self.warn, self.id, ask, interactive)
        if self.mcp is not None:
            add_mcp_tools(self.registry, ToolContext(workspace), self.mcp, self.warn)
        tools = self.registry.openai_tools()
        listed = tools_with_final(tools) if protocol == "json" else tools
        system = system_prompt(protocol, listed)
        instructions = load_instructions(root, cwd)
        if instructions:
            system += "\nProject instructions (AGENTS.md):\n" + instructions + "\n"
        # Under whole a reply holds files and commands only: no skill could be called.
        if self.skills is not None and self.skills.catalog.text and protocol != "whole":
            system += "\n" + self.skills.catalog.text
        history = _replay(record) if record is not None else None
        if record is None:
            self.emit(SessionStart(
                session_id=self.id, task="", workspace=str(root), base_url=client.base_url,
                protocol=protocol, preset=self.backend.preset, profile=self.backend.profile,
                model=client.props().get("model_path"), n_ctx=client.n_ctx(),
                repo=str(root) if self.repo is not None else None,
                speculation=self.backend.speculation))
        self.agent = Agent(client, self.registry, session_id=self.id, protocol=protocol,
                           system=system, emit=self.emit, sampling=self.backend.sampling,
                           auto_switch=auto_switch, tool_role=renders_tool_role(client),
                           limits=Limits(settings.max_steps, settings.max_time),
                           approve=make_approver(
                               settings.approval, ask, interactive,
                               self.skills.activations.preapproved if self.skills else None,
                               sensitive=workspace.git_interpreted,
                               preview=self.registry.preview,
                               secret=partial(holds_secrets, workspace)),
                           history=history,
                           context=ContextKeeper(client, client.n_ctx() or settings.ctx_size,
                                                 max_output=2048),
                           ui=reporter)
        if record is not None and self.skills is not None:
            for name in _activated_skills(record):
                self.skills.activations.restore(name)
        if record is not None:
            messages, results = _unanswered(record, self.agent)
            for message in messages:
                self.agent.messages.append(message)
                self.log.append(Message(session_id=self.id, message=message))
            for event in results:
                self.log.append(event)

    def emit(self, event: Event) -> None:
        """Log ``event`` and show it; a file tool's successful write is logged too, with what
        the file holds after it (:class:`~agent.events.FileWrite`)."""
        self.log.append(event)
        self.reporter.event(event)
        if isinstance(event, ToolCall) and event.name in FILE_TOOLS:
            self._calls[event.call_id] = event
        elif isinstance(event, ToolResult):
            call = self._calls.pop(event.call_id, None)
            if call is not None and not event.is_error:
                self._log_write(call)

    def _log_write(self, call: ToolCall) -> None:
        if self.repo is None or not isinstance(call.arguments, dict):
            return
        try:
            full = self.workspace.resolve(str(call.arguments.get("path", "")))
            rel = full.relative_to(Path(self.repo.working_tree_dir)).as_posix()
        except (PathRefused, ValueError, OSError):
            return
        self.log.append(FileWrite(session_id=self.id, task=self.tasks, path=cp.log_path(rel),
                                  digest=cp.file_digest(full)))

    def run_task(self, text: str) -> LoopResult:
        """Run one task between a before and an after checkpoint."""
        self.tasks += 1
        self.emit(TaskStart(session_id=self.id, task=self.tasks, text=text))
        self._checkpoint("before")
        client = self.backend.client
        try:
            with server_slot(client, self.reporter.note, self.id) as slot:
                client.id_slot = slot
                first = [(SKILL_TOOL, {"name": n}) for n in self.forced_skills]
                self.forced_skills = []
                message = with_named_files(text, self.registry, self.workspace,
                                           whole_project=self.agent.protocol == "whole")
                result = self.agent.run(message, first_calls=first)
                record_speculation(self.backend, result.timings, self.warn)
                return result
        except Exception as exc:
            # Logged only (the command line prints the error): `agent sessions` then says
            # how the task ended.
            self.log.append(ErrorEvent(session_id=self.id, message=str(exc),
                                       kind=type(exc).__name__))
            raise
        finally:
            self._checkpoint("after")

    def _checkpoint(self, kind: Literal["before", "after"]) -> None:
        if self.repo is None:
            return
        ref = cp.checkpoint_ref(self.id, self.tasks, "" if kind == "before" else kind)
        # Since the last snapshot: a task's end since its start, and a task's start since the
        # end of the one before, so what an earlier task's start found ignored (a secret it
        # then un-ignored) stays out of every later snapshot of the session.
        # The size limit is the settings' at a task's start; its end keeps the start's.
        limit = int(self.settings.checkpoint_max_file_mb * 2**20) if kind == "before" else None
        sha = cp.snapshot(self.repo, ref, f"dflash-agent {self.id} task {self.tasks} {kind}",
                          since=self.last_snapshot, max_file=limit)
        self.last_snapshot = sha
        unreadable = cp.outside_of(self.repo, sha).unreadable - self._said_unreadable
        if unreadable:
            self._said_unreadable |= unreadable
            self.warn(f"not checkpointed, as they cannot be read: "
                      f"{cp.listed(sorted(unreadable), 5)} (agent undo will neither restore "
                      "nor remove them)")
        cp.record_git_state(self.repo, _state_ref(self.id, self.tasks, kind),
                            f"dflash-agent {self.id} task {self.tasks} {kind}: index and stash")
        self.emit(Checkpoint(session_id=self.id, task=self.tasks, kind=kind, ref=ref, sha=sha))

    def commit_last(self, include_preexisting: bool = False
                    ) -> tuple[str | None, list[str], list[str]]:
        """Commit the last task's changes with a message from its text. Returns the new sha
        (None: nothing to commit), the files left out: those the task changed that the user
        had modified before it (none with ``include_preexisting``), and the nested
        repositories whose files the task changed (theirs to commit, not this one's)."""
        if self.repo is None:
            raise UserError("this session runs without git (--no-git): nothing to commit")
        record = load_record(self.id, lenient=True)
        number, before, after = _task_checkpoints(record, None)
        if after is None:
            raise UserError(f"task {number} has not finished; nothing to commit yet")
        subject = record.tasks.get(number, "changes").strip().splitlines()[0][:60]
        left_out = [] if include_preexisting else cp.preexisting_changes(self.repo, before,
                                                                         after)
        sha = cp.commit_task(self.repo, before, after,
                             f"{subject}\n\nMade by dflash-agent (session {self.id}, task "
                             f"{number}).", include_preexisting)
        return sha, left_out, cp.nested_changes(self.repo, before, after)

    def warn(self, message: str) -> None:
        """A warning on stderr (shown in --json mode too: JSON goes to stdout)."""
        self.reporter.console.print(f"warning: {message}", markup=False)

    def close(self) -> None:
        self.registry.close()
        if self.mcp is not None:
            self.mcp.close()
        self.backend.client.close()


def check_resumable(record: SessionRecord) -> None:
    """Raise :class:`UserError` when ``record``'s history cannot be sent again (see
    :func:`_replay`): checked before a server is started or connected to."""
    _replay(record)


def _replay(record: SessionRecord) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = []
    for e in record.events:
        if isinstance(e, Message):
            history.append(e.message)
        elif isinstance(e, Compaction):
            history = list(e.messages)
    if not history or history[0].get("role") != "system":
        raise UserError(f"session '{record.session_id}' has no recorded system message; "
                        "it cannot be resumed")
    for n, message in enumerate(history, 1):
        problem = _unsendable(message)
        if problem:
            # A field trial: a message of role "alien" was resumed, and every turn after it
            # failed with the server's 400 (the session could never go on).
            raise UserError(f"session '{record.session_id}' cannot be resumed: message {n} of "
                            f"its history {problem} (the log was edited or damaged)")
    return history


_ROLES = frozenset({"system", "user", "assistant", "tool"})


def _unsendable(message: object) -> str:
    """Why ``message`` (from a session log) is not one this product writes and a chat server
    takes, or ``""``: a role other than system/user/assistant/tool, or content that is neither
    text nor a list of text parts."""
    if not isinstance(message, dict):
        return "is not an object"
    if message.get("role") not in _ROLES:
        return f"has the role {str(message.get('role'))[:40]!r}"
    content = message.get("content")
    if content is None or isinstance(content, str):
        return ""
    if isinstance(content, list) and all(
            isinstance(part, dict) and part.get("type") == "text"
            and isinstance(part.get("text"), str) for part in content):
        return ""
    return "has content that is neither text nor text parts"


def _activated_skills(record: SessionRecord) -> list[str]:
    """Skills a resumed session had activated (their content is in its history)."""
    ok = {e.call_id for e in record.events if isinstance(e, ToolResult) and not e.is_error}
    return [str(e.arguments.get("name")) for e in record.events
            if isinstance(e, ToolCall) and e.name == SKILL_TOOL and e.call_id in ok]


def _unanswered(record: SessionRecord,
                agent: Agent) -> tuple[list[dict[str, Any]], list[ToolResult]]:
    """Result messages for the calls of the last reply that never got one (the process died
    mid-tool), and the ``tool_result`` events to log for those that never finished.

    The calls are those of the last assistant message (its wire ``tool_calls``, else its
    ``model_turn``; an injected call has only its ``tool_call`` event), up to a final answer:
    also a call that never started gets an answer ("not run"). What counts is what was sent:
    a result message in the log answers its call even when the process died before the
    ``tool_result`` event that follows it (answering it again would put two results for one
    call id into the next request). A call that finished but whose result was never sent
    (``text`` sends a reply's results together) gets its logged result. ``text`` results go
    back as one user message, as the loop sends them.
    """
    events = record.events
    last = max((i for i, e in enumerate(events) if isinstance(e, Message)
                and e.message.get("role") == "assistant"), default=None)
    if last is None:
        return [], []
    reply, tail = events[last].message, events[last + 1:]
    if any(isinstance(e, Compaction) for e in tail):
        return [], []  # compacted before the next request: every result was in
    turn = events[last - 1] if last else None
    step = turn.step if isinstance(turn, ModelTurn) else 0
    calls: list[tuple[str, str, int]] = []
    if reply.get("tool_calls"):
        calls = [(c["id"], c["function"]["name"], step) for c in reply["tool_calls"]]
    elif isinstance(turn, ModelTurn):
        calls = [(c.id, c.name, step) for c in turn.tool_calls]
    known = {c[0] for c in calls}
    calls += [(e.call_id, e.name, e.step) for e in tail
              if isinstance(e, ToolCall) and e.call_id not in known]
    names = [name for _, name, _ in calls]
    if FINAL_ANSWER in names:
        calls = calls[:names.index(FINAL_ANSWER)]  # the task ended; later calls never run
    pending = list(calls)
    for e in tail:
        if not isinstance(e, Message):
            continue
        message = e.message
        if message.get("role") == "tool":
            pending = [c for c in pending if c[0] != message.get("tool_call_id")]
        elif message.get("role") == "user":
            # Results sent as user messages (json without a tool role; text, where one
            # message holds every result of a reply) carry tool names, not call ids: each
            # "[result of tool X]" answers the oldest pending call of X.
            content = str(message.get("content") or "")
            for name in {c[1] for c in pending}:
                count = content.count(RESULT_PREFIX.format(name=name))
                hits = [c for c in pending if c[1] == name][:count]
                pending = [c for c in pending if c not in hits]
    started = {e.call_id for e in tail if isinstance(e, ToolCall)}
    finished = {e.call_id: e for e in tail if isinstance(e, ToolResult)}
    messages: list[dict[str, Any]] = []
    results: list[ToolResult] = []
    for call_id, name, call_step in pending:
        done = finished.get(call_id)
        if done is not None:
            text = ("ERROR: " if done.is_error else "") + done.text
        else:
            text = INTERRUPTED if call_id in started else NOT_RUN
            results.append(ToolResult(session_id=record.session_id, step=call_step,
                                      call_id=call_id, name=name, text=text, is_error=True,
                                      duration_s=0.0))
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text}
                        if reply.get("tool_calls")
                        else agent.calls.result_message(call_id, name, text))
    if len(messages) > 1 and all(m["role"] == "user" for m in messages):
        messages = [{"role": "user", "content": "\n\n".join(m["content"] for m in messages)}]
    return messages, results
