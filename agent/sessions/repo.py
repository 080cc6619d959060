"""Repo edit sessions: ``agent run`` / ``chat`` / ``resume`` over one event log, with a git
checkpoint before and after every task. Undo and diff from those checkpoints are in
:mod:`agent.sessions.undo`, the history a resume sends again in :mod:`agent.sessions.resume`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Literal

from agent.config import Settings
from agent.context import DEFAULT_N_CTX, ContextKeeper
from agent.errors import UsageError, UserError
from agent.events import (
    Checkpoint,
    ErrorEvent,
    Event,
    FileWrite,
    Message,
    SessionStart,
    TaskStart,
    ToolCall,
    ToolResult,
)
from agent.loop import Agent, Limits, LoopResult
from agent.prompts import system_prompt
from agent.protocols.base import tools_with_final
from agent.runtime import Backend, choose_protocol, connect, record_speculation, renders_tool_role
from agent.sessions.approval import make_approver
from agent.sessions.checkpoints.commits import commit_task, nested_changes, preexisting_changes
from agent.sessions.checkpoints.coverage import outside_of
from agent.sessions.checkpoints.git_state import record_git_state
from agent.sessions.checkpoints.plumbing import checkpoint_ref, open_repo
from agent.sessions.checkpoints.restores import file_digest, listed, log_path
from agent.sessions.checkpoints.snapshots import snapshot
from agent.sessions.instructions import load_instructions
from agent.sessions.log import SessionLog, new_session_id
from agent.sessions.named_files import with_named_files
from agent.sessions.record import (
    FILE_TOOLS,
    latest_snapshot,
    load_record,
    state_ref,
    task_checkpoints,
)
from agent.sessions.resume import activated_skills, replay, unanswered
from agent.sessions.slots import server_slot
from agent.ui import Reporter
from skills.activation import TOOL_NAME as SKILL_TOOL
from skills.session import UnknownSkill, attach_skills, find_skills
from tools import reaper
from tools.base import ToolContext
from tools.mcp.setup import add_mcp_tools, start_servers
from tools.registry import Registry, default_registry
from tools.secretfiles import holds_secrets
from tools.workspace import PathRefused, Workspace


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
        self.repo = None if no_git else open_repo(cwd)
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
            self.last_snapshot = latest_snapshot(record)
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
        history = replay(record) if record is not None else None
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
            for name in activated_skills(record):
                self.skills.activations.restore(name)
        if record is not None:
            messages, results = unanswered(record, self.agent)
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
        self.log.append(FileWrite(session_id=self.id, task=self.tasks, path=log_path(rel),
                                  digest=file_digest(full)))

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
        ref = checkpoint_ref(self.id, self.tasks, "" if kind == "before" else kind)
        # Since the last snapshot: a task's end since its start, and a task's start since the
        # end of the one before, so what an earlier task's start found ignored (a secret it
        # then un-ignored) stays out of every later snapshot of the session.
        # The size limit is the settings' at a task's start; its end keeps the start's.
        limit = int(self.settings.checkpoint_max_file_mb * 2**20) if kind == "before" else None
        sha = snapshot(self.repo, ref, f"dflash-agent {self.id} task {self.tasks} {kind}",
                          since=self.last_snapshot, max_file=limit)
        self.last_snapshot = sha
        unreadable = outside_of(self.repo, sha).unreadable - self._said_unreadable
        if unreadable:
            self._said_unreadable |= unreadable
            self.warn(f"not checkpointed, as they cannot be read: "
                      f"{listed(sorted(unreadable), 5)} (agent undo will neither restore "
                      "nor remove them)")
        record_git_state(self.repo, state_ref(self.id, self.tasks, kind),
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
        number, before, after = task_checkpoints(record, None)
        if after is None:
            raise UserError(f"task {number} has not finished; nothing to commit yet")
        subject = record.tasks.get(number, "changes").strip().splitlines()[0][:60]
        left_out = [] if include_preexisting else preexisting_changes(self.repo, before,
                                                                         after)
        sha = commit_task(self.repo, before, after,
                             f"{subject}\n\nMade by dflash-agent (session {self.id}, task "
                             f"{number}).", include_preexisting)
        return sha, left_out, nested_changes(self.repo, before, after)

    def warn(self, message: str) -> None:
        """A warning on stderr (shown in --json mode too: JSON goes to stdout)."""
        self.reporter.console.print(f"warning: {message}", markup=False)

    def close(self) -> None:
        self.registry.close()
        if self.mcp is not None:
            self.mcp.close()
        self.backend.client.close()
