"""Undo and diff of a session's tasks, from its checkpoints: they need no model server, only
the session log and the private refs (and the logs of sessions that ran at the same time)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import git

from agent.errors import UserError
from agent.events import Checkpoint, FileWrite, ProjectPlan
from agent.sessions.checkpoints.diffs import changed_files, diff
from agent.sessions.checkpoints.git_state import restore_git_state
from agent.sessions.checkpoints.plumbing import (
    checkpoint_ref,
    commits_since,
    open_repo,
    parent_or_empty,
)
from agent.sessions.checkpoints.restores import Overlap, RestoreConflict, RestorePlan, restore
from agent.sessions.log import SessionLog
from agent.sessions.overlap import overlap_of, task_work, tasks_of
from agent.sessions.record import (
    SessionRecord,
    latest_snapshot,
    load_record,
    state_ref,
    task_checkpoints,
)
from tools.workspace import display_name


def _repo_of(record: SessionRecord) -> git.Repo:
    if not record.start.repo and any(isinstance(e, ProjectPlan) for e in record.events):
        # new-project starts before its `git init`: "did not run in a git repo" was wrong.
        raise UserError(f"session '{record.session_id}' created the project in "
                        f"{record.start.workspace}: there is no state before it to go back to "
                        "or compare with (its commit holds the whole project; remove the "
                        "folder to undo it)")
    if not record.start.repo:
        raise UserError(f"session '{record.session_id}' did not run in a git repo")
    return open_repo(Path(record.start.repo))



def undo_task(session_id: str, task: int | None = None, force: bool = False,
              log: SessionLog | None = None) -> RestorePlan:
    """Restore the files a task changed to their state before it (the last task by default);
    run again right after, it undoes that undo (the files come back as the agent left them).

    The current tree is snapshotted first, so every undo can itself be undone. An undo also
    stores again the stash entries the task dropped and puts back the staged state it changed
    (see :func:`~agent.sessions.checkpoints.git_state.restore_git_state`); undoing the undo
    leaves both alone, so the stash entries stay and no one's staging is lost. Raises
    :class:`UserError` (including ``RestoreConflict`` when the user changed those files after the
    agent, unless ``force``).
    """
    record = load_record(session_id, lenient=True)
    repo = _repo_of(record)
    number, before, after = task_checkpoints(record, task)
    marks = [e for e in record.events if isinstance(e, Checkpoint) and e.task == number
             and e.kind in ("undo", "redo")]
    kind: Literal["undo", "redo"] = "undo"
    since = after or before
    if marks and marks[-1].kind == "undo":
        # Undo the undo: back to the snapshot taken just before it.
        kind, before, after = "redo", marks[-1].sha, before
        since = before
    ref = checkpoint_ref(session_id, number, f"{kind}-{len(marks) + 1}")
    # Without an end checkpoint (the run was killed) only the log tells which files are the
    # agent's: those its file tools wrote, while they still hold what it left.
    wrote = {e.path: e.digest for e in record.events
             if isinstance(e, FileWrite) and e.task == number} if after is None else None
    # Another session that ran at the same time left its changes in this task's checkpoints.
    overlap = None
    work = task_work(record, number)
    if kind == "undo" and work is not None:
        overlap = overlap_of(repo, record, [work], work.start, work.end)
    try:
        plan = restore(repo, before, after, ref, force=force, since=since, agent_wrote=wrote,
                          overlap=overlap)
    except RestoreConflict as exc:  # the session's id, for the advice an MCP host gets
        raise RestoreConflict(exc.conflicts, session_id, exc.unended, exc.others) from None
    sha = repo.git.rev_parse(ref)
    (log or SessionLog(session_id, "", Path(record.start.workspace), resume=True)).append(
        Checkpoint(session_id=session_id, task=number, kind=kind, ref=ref, sha=sha))
    if kind == "undo":
        plan.commits_since = commits_since(repo, before)
        # After the log line: the files are back whatever happens here, and a failure is
        # reported in the plan rather than raised.
        restore_git_state(repo, state_ref(session_id, number, "before"),
                             state_ref(session_id, number, "after"), plan,
                             head=parent_or_empty(repo, before))
    return plan


def diff_task(session_id: str) -> str:
    """Unified diff of what the session's last task changed: from its starting checkpoint to
    the one taken when it ended (to now while it has none). What a host reads as the task's
    result: a diff to now showed the user's later edits, another task's, or nothing once
    undone (a field trial). Files another session alone changed meanwhile are left out."""
    record = load_record(session_id, lenient=True)
    number, before, after = task_checkpoints(record, None)
    repo = _repo_of(record)
    work = task_work(record, number)
    overlap = overlap_of(repo, record, [work], work.start, work.end) if work else Overlap()
    theirs: dict[str, list[str]] = {}
    if overlap.wrote or overlap.may_have:
        theirs, _ = overlap.split(changed_files(repo, before, after))
    return diff(repo, before, after, leave_out=list(theirs))


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
    number, before, _ = task_checkpoints(record, first)
    # Now as the session's latest snapshot would see it: what any of its tasks found ignored
    # at its start is left out (a secret a task un-ignored is no new file of the session).
    since = latest_snapshot(record)
    works = [w for w in tasks_of(record) if w.task >= number]
    overlap = overlap_of(repo, record, works, works[0].start if works else time.time(),
                       time.time())
    theirs: dict[str, list[str]] = {}
    shared: dict[str, list[str]] = {}
    if overlap.wrote or overlap.may_have:
        theirs, shared = overlap.split(changed_files(repo, before, since=since))
    if notes is not None:
        notes += [f"note: left out {display_name(p)}, changed by {_sessions(ids)}, not by this "
                  "one" for p, ids in theirs.items()]
        notes += [f"note: {display_name(p)} was changed by {_sessions(ids)} too, which ran at "
                  "the same time" for p, ids in shared.items()]
    return diff(repo, before, since=since, leave_out=list(theirs), notes=notes)


def _sessions(ids: Sequence[str]) -> str:
    return ("session " if len(ids) == 1 else "sessions ") + ", ".join(ids)
