"""The saved sessions: ``agent sessions`` lists them, ``agent resume`` continues one in chat
mode, ``agent undo`` puts back a task's files and ``agent diff`` shows what a session changed;
without an id, the latest session of the repository around the current directory."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from agent.cli.chat import run_chat
from agent.cli.common import age, err, session_settings
from agent.cli.options import (
    Approval,
    BaseUrl,
    CtxSize,
    JsonOut,
    MaxSteps,
    MaxTime,
    Preset,
    Profile,
    ToolProtocol,
)
from agent.errors import UsageError, UserError
from agent.sessions.log import SessionSummary, list_sessions
from agent.sessions.record import load_record
from agent.sessions.repo import RepoSession
from agent.sessions.resume import check_resumable
from agent.sessions.undo import diff_session, undo_task
from agent.ui import Reporter, echo
from agent.ui.summary import nothing_undone, undo_notes
from tools import reaper
from tools.workspace import display_name


def _pick_session(session_id: str | None, here_only: bool = True) -> str:
    """``session_id``, else :func:`_latest_session`'s. An id given empty is refused: `resume
    ""` (a variable that was not set) went on with the latest session, which may not be the
    one meant."""
    if session_id is not None and not session_id.strip():
        raise UsageError("the session id is empty; name one from `agent sessions`, or leave it "
                         "out for the latest")
    return session_id or _latest_session(here_only).id


def _latest_session(here_only: bool = True) -> SessionSummary:
    """The latest session that ran a task (the latest of all where none did) of the
    repository around the current directory (``here_only``: the innermost folder that has
    sessions, never past the innermost git repository holding it) or of any repository."""
    sessions = list_sessions()
    if here_only:
        cwd = Path.cwd().resolve()
        top = _repository_around(cwd)
        sessions = [s for s in sessions
                    if s.workspace and (cwd == Path(s.workspace)
                                        or Path(s.workspace) in cwd.parents)
                    # Not past the repository the directory is in: an outer repository's
                    # task is not this one's (undo from a nested repository with no session
                    # of its own reverted the outer repository's files).
                    and (top is None or top == Path(s.workspace)
                         or top in Path(s.workspace).parents)]
        # The innermost folder that has sessions: a --no-git session's folder inside the
        # repository before the repository's own sessions.
        innermost = max((len(Path(s.workspace).parts) for s in sessions), default=0)
        sessions = [s for s in sessions if len(Path(s.workspace).parts) == innermost]
    if not sessions:
        where = " for this directory" if here_only else ""
        raise UsageError(f"there is no saved session{where} (start one with `agent run` or "
                         "`agent chat`, or name a session id from `agent sessions`)")
    # A session that ran no task (a damaged log; a chat left at its first prompt is not
    # listed at all) must not hide the task before it from undo, diff and resume.
    ran = [s for s in sessions if s.tasks]
    return (ran or sessions)[0]


def _repository_around(folder: Path) -> Path | None:
    """The work tree of the innermost git repository holding ``folder`` (a ``.git`` folder,
    or the ``.git`` file of a submodule or linked worktree), or None outside any."""
    for candidate in (folder, *folder.parents):
        if os.path.exists(candidate / ".git"):  # never raises: a folder it may not read
            return candidate
    return None


def resume_cmd(session_id: Annotated[str | None, typer.Argument(help="Session id (see "
                                                                "`agent sessions`).")] = None,
               last: Annotated[bool, typer.Option("--last", help="The most recent "
                                                  "session of this repository that ran a "
                                                  "task (the default).")] = False,
               approval: Approval = None, preset: Preset = None, profile: Profile = None,
               base_url: BaseUrl = None, ctx_size: CtxSize = None,
               tool_protocol: ToolProtocol = None, max_steps: MaxSteps = None,
               max_time: MaxTime = None) -> None:
    """Continue a saved session (the exact conversation) in chat mode. It keeps the session's
    tool-call protocol unless --tool-protocol says otherwise."""
    # Of this repository, as Claude Code's --continue and undo/diff here have it: the latest
    # of all resumed another repository's chat, its commands then running there.
    chosen = _pick_session(None if last else session_id)
    record = load_record(chosen)
    # A run killed with SIGKILL while its watchdog was gone too may have left commands running.
    stopped = reaper.stop_leftovers(chosen)
    if stopped:
        err.print(f"stopped {stopped} process{'es' if stopped != 1 else ''} left running by "
                  f"the previous run of session {chosen}", markup=False)
    check_resumable(record)
    repo = Path(record.start.repo or record.start.workspace)
    if not repo.is_dir():
        # repo_dir's "does not exist" did not say whose folder it was.
        raise UserError(f"session {chosen} ran in {repo}, which is no longer a folder; it "
                        "cannot be resumed there")
    settings = session_settings(repo, approval=approval, preset=preset, profile=profile,
                                base_url=base_url, ctx_size=ctx_size, max_steps=max_steps,
                                max_time=max_time)
    reporter = Reporter()
    run_chat(RepoSession(settings, repo, reporter, no_git=record.start.repo is None,
                         resume=chosen, protocol=tool_protocol), reporter)


def sessions_cmd(json_out: JsonOut = False) -> None:
    """Saved sessions: id, first task, repository, age, tasks, steps and how the last task
    ended (done, stopped and why, interrupted, failed, no end recorded)."""
    found = list_sessions()
    if json_out:
        typer.echo(json.dumps([s.__dict__ for s in found], indent=2))
        return
    if not found:
        echo("no sessions yet")
    now = time.time()
    for s in found:
        ago = age(now - s.started)
        echo(f"{s.id}  {ago:>6} ago  tasks {s.tasks}  steps {s.steps}  {s.end_detail}  "
             f"{s.workspace}  {s.task[:60]!r}")


def undo_cmd(session_id: Annotated[str | None, typer.Argument(help="Session id (default: "
                                                              "the latest here that ran a "
                                                              "task).")] = None,
             task: Annotated[int | None, typer.Option(help="Task number (default: the "
                                                      "last).")] = None,
             force: Annotated[bool, typer.Option(help="Overwrite files you changed after "
                                                 "the agent.")] = False) -> None:
    """Put back the files a task changed (the current state is checkpointed first)."""
    latest = _latest_session() if session_id is None else None
    plan = undo_task(latest.id if latest else _pick_session(session_id), task, force)
    if latest is not None:  # say which session was picked: it may not be the one expected
        err.print(f"session {latest.id} ({latest.workspace})", markup=False)
    if not plan.did_something:
        echo(nothing_undone(plan))
    for path in plan.changed:
        echo(f"{'removed' if path in plan.removed else 'restored'} {display_name(path)}")
    for line in plan.git_lines():
        echo(line)
    for line in undo_notes(plan):
        err.print(line, markup=False)


def diff_cmd(session_id: Annotated[str | None, typer.Argument(help="Session id (default: the "
                                                              "latest here that ran a task)."
                                                              )] = None
             ) -> None:
    """The working tree against the session's first checkpoint, as a unified diff."""
    notes: list[str] = []  # on stderr: piped, the diff stays a patch `git apply` takes
    diff = diff_session(_pick_session(session_id), notes=notes) or "(no changes)"
    for note in notes:
        err.print(note, markup=False)
    # Piped (`agent diff | git apply`) the bytes stay exact (typer.echo would strip escape
    # sequences from them); on a terminal the model's escape sequences must not act.
    if sys.stdout.isatty():
        echo(diff)
    else:
        # git's own bytes (its output was read with surrogate escapes), whatever the locale's
        # encoding: under LC_ALL=C or a Latin-1 locale the text write raised or re-encoded.
        sys.stdout.flush()
        sys.stdout.buffer.write(diff.encode("utf-8", "surrogateescape") + b"\n")
        sys.stdout.buffer.flush()
