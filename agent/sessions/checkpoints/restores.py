"""Restoring a snapshot's files: the plan (which files, which of them were edited since, which
are another session's), its refusal (:class:`RestoreConflict`), and the writes, which touch
only the files the task changed, never the index, HEAD or the stash (those are
:mod:`agent.sessions.checkpoints.git_state`'s)."""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import git

from agent.errors import UserError
from agent.sessions.checkpoints.plumbing import (
    GITLINK_MODE,
    RepoStateError,
    run_git,
    split_z,
    temp_index,
)
from agent.sessions.checkpoints.snapshots import commit_snapshot, snapshot
from agent.sessions.checkpoints.tree import Flat, flat_diff, large_of, unreadable_of
from tools.workspace import display_name


class RestoreConflict(UserError):
    """Files the task changed were edited again after the agent finished (``session_id``: the
    session whose undo it refused, named in the advice an MCP host gets); ``unended``: the
    task has no end checkpoint, and these are files changed since it started that the agent's
    file tools did not leave as they are now."""

    def __init__(self, conflicts: Sequence[str], session_id: str = "SESSION_ID",
                 unended: bool = False, others: dict[str, list[str]] | None = None):
        self.conflicts = list(conflicts)
        self.unended = unended
        self.others = dict(others or {})
        """Those of the conflicts another session may have changed too, with its ids: it ran
        while the task did, and the logs cannot tell whose change each is."""
        super().__init__(self.worded(""), cli_hint="rerun with --force to overwrite them",
                         mcp_hint=f"run `agent undo {session_id} --force` in a terminal to "
                         "overwrite them")

    def worded(self, then: str) -> str:
        """The refusal, ending with what to do ``then`` (the chat's is a slash command)."""
        if self.others:
            sessions = sorted({s for ids in self.others.values() for s in ids})
            shared = [p for p in self.conflicts if p in self.others]
            rest = [p for p in self.conflicts if p not in self.others]
            said = (f"{len(shared)} file(s) the task changed were changed too by "
                    f"{'session ' if len(sessions) == 1 else 'sessions '}"
                    f"{', '.join(sessions)}, which ran at the same time: "
                    f"{listed(shared)} (the logs cannot tell whose change each is)")
            if rest:
                why = ("changed since the task started, and not as its file tools left them "
                       "(it has no end checkpoint)" if self.unended
                       else "changed after the agent finished")
                said += f"; {len(rest)} more {why}: {listed(rest)}"
            return f"{said}; nothing was restored. Review them, then {then}"
        shown = listed(self.conflicts)
        if self.unended:
            return (f"the task has no end checkpoint (its run was killed or crashed), so "
                    f"{len(self.conflicts)} file(s) changed since it started cannot be told "
                    f"apart from changes made after it (the agent's file tools did not leave "
                    f"them as they are now): {shown}; nothing was restored. Review them "
                    f"(`agent diff`), then {then}")
        return (f"{len(self.conflicts)} file(s) changed after the agent finished: {shown}; "
                f"nothing was restored. Review them, then {then}")


def listed(paths: Sequence[str], shown: int = 10) -> str:
    """Up to ``shown`` of ``paths`` as the tools show names (one line each: a newline in a name
    is ``\\x0a``), then how many more."""
    more = f" and {len(paths) - shown} more" if len(paths) > shown else ""
    return ", ".join(display_name(p) for p in paths[:shown]) + more


@dataclass
class Overlap:
    """What other sessions did in the same repository while a task ran, from their logs; keys
    are paths as :func:`log_path` writes them.

    A task's checkpoints are of the whole tree, so a change another session made meanwhile is
    in them too (a field trial: undo of A restored B's file, and A's diff showed it). A file
    only another session's file tools wrote, and this task could not have (it wrote it with no
    tool and ran no command), is that session's: an undo leaves it and a diff leaves it out.
    One both may have changed is refused without ``--force``."""

    wrote: dict[str, set[str]] = field(default_factory=dict)
    """Path → ids of the other sessions whose file tools wrote it while the task ran."""
    may_have: dict[str, set[str]] = field(default_factory=dict)
    """Path → ids of the other sessions that ran commands (bash, an MCP tool) then and whose
    own checkpoints show it changed."""
    mine: set[str] = field(default_factory=set)
    """The paths this task's file tools wrote."""
    mine_opaque: bool = False
    """Whether this task ran commands, which may have written any file."""

    def split(self, paths: Sequence[str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        """``paths`` (from git) that are other sessions' alone, and those that may be both
        this task's and another's, each with the other sessions' ids."""
        theirs, shared = {}, {}
        for path in paths:
            key = log_path(path)
            ids = sorted(self.wrote.get(key, set()) | self.may_have.get(key, set()))
            if not ids:
                continue
            if key in self.wrote and key not in self.mine and not self.mine_opaque:
                theirs[path] = ids
            else:
                shared[path] = ids
        return theirs, shared


@dataclass
class RestorePlan:
    """What a restore rewrites: ``changed`` files, of which ``conflicts`` were edited by the
    user after the agent finished and ``removed`` were deleted (absent from the restored
    state); the others were written back."""

    changed: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    commits_since: list[str] = field(default_factory=list)
    """Commits on HEAD made since the task started (``<short sha> <subject>``, newest first,
    at most 3): a restore writes files only, so these stay, and the user must be told."""
    stash_restored: list[str] = field(default_factory=list)
    """Stash entries the task dropped that the undo stored again, as ``stash@{<n>}: <message>``
    with their place in the stash now (a `git stash drop` or `clear` by the model would
    otherwise lose them once git collects garbage)."""
    index_restored: list[str] = field(default_factory=list)
    """Paths whose staged state (their entry in git's index) the task changed, e.g. with `git
    reset` or `git add`, and the undo put back as the user had staged them."""
    index_unstaged: list[str] = field(default_factory=list)
    """Those of :attr:`index_restored` the user had nothing staged for (the task's `git add`):
    the undo unstaged them."""
    not_restored: list[str] = field(default_factory=list)
    """What the undo left for the user, one sentence each, naming the exact git command that
    puts it back: a stash entry git would not store again, or staged state that was changed
    again after the agent finished (it is never overwritten)."""

    @property
    def did_something(self) -> bool:
        """Whether the restore wrote files, stash entries or staged state back."""
        return bool(self.changed or self.stash_restored or self.index_restored)

    def git_lines(self) -> list[str]:
        """What the restore did besides files, one line each: stash entries stored again,
        paths staged again and paths unstaged (a task that only ran `git stash drop` or `git
        reset` changed no file, and the undo said "nothing to undo" while it put them back)."""
        # A path the task had staged is unstaged by the undo: "staged again" said the opposite.
        return ([f"stash entry back: {entry}" for entry in self.stash_restored]
                + [f"unstaged, as you had it: {display_name(path)}"
                   if path in self.index_unstaged
                   else f"staged again as you had it: {display_name(path)}"
                   for path in self.index_restored])


def log_path(path: str) -> str:
    """``path`` (from git, a byte that is not UTF-8 held as a surrogate escape) as a session
    log can hold it: such a byte as ``\\xNN``, the rest as it is."""
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def file_digest(full: Path) -> str | None:
    """sha256 of the file at ``full`` (of a symbolic link's target, prefixed ``link:``), None
    when nothing is there or it cannot be read: what :class:`~agent.events.FileWrite`
    records."""
    try:
        if full.is_symlink():
            return "link:" + hashlib.sha256(os.fsencode(os.readlink(full))).hexdigest()
        if not full.is_file():
            return None
        digest = hashlib.sha256()
        with full.open("rb") as data:
            for block in iter(lambda: data.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    except OSError:
        return None


def plan_restore(repo: git.Repo, before: str, after: str | None,
                 agent_wrote: dict[str, str | None] | None = None) -> RestorePlan:
    """The files a restore to ``before`` rewrites, and which of them the user edited since.

    With ``after`` (the snapshot taken when the agent finished) the files are those the task
    changed, and a conflict is one whose current content or mode differs from ``after``.
    Without it (a killed run) every file changed since ``before``, and a conflict is each one
    that ``agent_wrote`` (the files the agent's tools wrote, by :func:`log_path`, with their
    :func:`file_digest` afterwards) does not show as the agent left it: nothing tells the
    agent's changes from later ones (with ``agent_wrote`` None, none is a conflict).
    """
    now = commit_snapshot(repo, "dflash-agent: the working tree now", after or before, None)
    return _plan(repo, before, after, now, agent_wrote)[0]


def _plan(repo: git.Repo, before: str, after: str | None, current: str,
          agent_wrote: dict[str, str | None] | None = None) -> tuple[RestorePlan, Flat]:
    """The plan of a restore to ``before`` (see :func:`plan_restore`), and what differs from
    ``before`` to ``after`` (to ``current`` without it), large files included: one that was
    there at ``before`` is never in the plan (a note says when it changed), and one that came
    or grew since is removed or written back from ``before`` (its end is None or a blob). A
    file one of the snapshots could not read is never in the plan (a note says so)."""
    end = after or current
    flat = flat_diff(repo, before, end)
    since = flat_diff(repo, after, current) if after else None
    then, later = large_of(flat, 0), large_of(flat, 1)
    stuck = unreadable_of(flat, 0) | unreadable_of(flat, 1) | (
        unreadable_of(since, 1) if since else set())
    changed = set(flat.changes) - stuck
    notes = [f"{display_name(path)}: it could not be read when a checkpoint was taken; it is "
             "left as it is" for path in sorted(stuck & set(flat.changes))]
    for path in sorted(then.keys() | later.keys()):
        if path in then:
            # Never stored: it cannot be written back, and it was there before the task.
            changed.discard(path)
            if then[path] != later.get(path):
                notes.append(f"{display_name(path)}: too large to checkpoint (an untracked file of "
                             f"{then[path][0]:,} bytes when the task started), and it changed "
                             f"since{' in the task' if after else ''}; it is left as it is")
        else:
            changed.add(path)
            flat.changes.setdefault(path, (None, None))  # created by the task: removed
    plan = RestorePlan(changed=sorted(changed), not_restored=notes)
    if after is None:
        if agent_wrote is None:
            return plan, flat
        root = Path(repo.working_tree_dir)
        # A file is the agent's only while it holds what the agent's last write left (or is
        # gone, as its undo_edit left it): anything else may be the user's work since.
        unknown = object()
        plan.conflicts = [p for p in plan.changed
                          if agent_wrote.get(log_path(p), unknown) != file_digest(root / p)]
        return plan, flat
    assert since is not None
    now = large_of(since, 1)
    edited = set(since.changes) | {p for p, was in later.items() if now.get(p) != was}
    plan.conflicts = [p for p in plan.changed if p in edited]
    return plan, flat


def restore(repo: git.Repo, before: str, after: str | None, undo_ref: str,
            force: bool = False, since: str | None = None,
            agent_wrote: dict[str, str | None] | None = None,
            overlap: Overlap | None = None) -> RestorePlan:
    """Put back the files the task changed as they were in ``before``; returns the plan.

    The current tree is first snapshotted to ``undo_ref`` (``since`` the given snapshot, by
    default ``after`` or else ``before``: what they left out stays out), so restoring
    ``undo_ref`` undoes this. Files absent from ``before`` are deleted, with the folders that
    became empty and did not exist in ``before``. Files in nested repositories (submodules
    too) are restored from their own snapshots; a nested repository's own index, HEAD and
    stash are left alone, and one the checkpoint cannot read is reported in ``not_restored``.
    No other file is touched, nor the index, HEAD or the stash (:func:`restore_git_state` does
    those). Raises
    :class:`RestoreConflict` (nothing written) when the user edited some of the files after
    the agent finished, unless ``force`` (without ``after``: see :func:`plan_restore` for
    ``agent_wrote``). ``overlap``: what other sessions did meanwhile; files that are theirs
    alone are left as they are (said in ``not_restored``), and files that may be theirs too
    are conflicts. Raises
    :class:`RepoStateError` when a folder or a symbolic link stands where a file must go.
    """
    current = snapshot(repo, undo_ref, f"dflash-agent: state before restoring {before[:12]}",
                       since=since or after or before)
    plan, flat = _plan(repo, before, after, current, agent_wrote)
    # A nested repository this checkpoint cannot read (deleted since, or a gitlink that is no
    # snapshot of ours): its files cannot be compared or written back; said, not guessed at.
    stuck = [p for p in plan.changed
             if any(end is not None and end[0] == GITLINK_MODE for end in flat.changes[p])]
    plan.changed = [p for p in plan.changed if p not in stuck]
    plan.conflicts = [p for p in plan.conflicts if p not in stuck]
    plan.not_restored += [f"{display_name(p)}/: a nested git repository that this checkpoint "
                          "cannot read (it was removed or replaced); its files are left as "
                          "they are"
                          for p in stuck]
    theirs, shared = (overlap or Overlap()).split(plan.changed)
    plan.changed = [p for p in plan.changed if p not in theirs]
    plan.conflicts = sorted({p for p in plan.conflicts if p not in theirs} | set(shared))
    plan.not_restored += [f"{display_name(p)}: changed by "
                          f"{'session ' if len(ids) == 1 else 'sessions '}{', '.join(ids)} "
                          "while this task ran, not by it; left as it is"
                          for p, ids in theirs.items()]
    if plan.conflicts and not force:
        raise RestoreConflict(plan.conflicts, unended=after is None, others=shared)
    root = Path(repo.working_tree_dir)
    write = sorted(p for p in plan.changed if flat.changes[p][0] is not None)
    delete = sorted((p for p in plan.changed if flat.changes[p][0] is None),
                    key=lambda p: (-p.count("/"), p))
    _check_targets(root, write, delete)
    plan.removed = sorted(delete)
    # Deletions first: a file may have to make way for a folder of the same name, or back.
    if delete:
        kept_dirs = set()
        for prefix, (holder, commit, _) in flat.holders.items():
            if commit is not None:
                kept_dirs |= {prefix + d for d in split_z(run_git(
                    holder, "ls-tree", "-r", "-d", "-z", "--name-only", commit))}
                kept_dirs.add(prefix.rstrip("/"))
        for rel in delete:
            _remove(root, rel, kept_dirs)
    # Each file from the repository its checkpoint is in (a nested one's own object store).
    for prefix, (holder, commit, _) in flat.holders.items():
        mine = [p[len(prefix):] for p in write if flat.changes[p][0][2] == prefix]
        if mine and commit is not None:
            _checkout(holder, commit, mine)
    return plan


def _check_targets(root: Path, write: list[str], delete: list[str]) -> None:
    """Refuse before touching anything when a path leads through a symbolic link (it could
    point outside the work tree) or a folder holding other files stands where a file goes."""
    resolved = root.resolve()
    going = set(delete)
    for rel in write + delete:
        parent = (root / rel).parent
        if parent.resolve() != resolved.joinpath(*Path(rel).parent.parts) and \
                not _through_a_going_link(root, rel, going):
            raise RepoStateError(f"cannot restore {display_name(rel)}: a folder on its path is "
                                 "a symbolic link; replace it with a real folder and retry")
    for rel in write:
        target = root / rel
        if target.is_dir() and not target.is_symlink():
            others = [str(p.relative_to(root)) for p in target.rglob("*")
                      if (p.is_symlink() or not p.is_dir())
                      and p.relative_to(root).as_posix() not in going]
            if others:
                raise RepoStateError(f"cannot restore {display_name(rel)}: a folder holding "
                                     f"files the task did not create "
                                     f"({display_name(others[0])}) is in its place; move it "
                                     "away and retry")


def _through_a_going_link(root: Path, rel: str, going: set[str]) -> bool:
    """Whether the first symbolic link on ``rel``'s folders is one of ``going``: removed
    before anything is written (a task that put a link in a folder's place), so the path
    leads through real folders by then."""
    parts = Path(rel).parent.parts
    for n in range(1, len(parts) + 1):
        folder = "/".join(parts[:n])
        if (root / folder).is_symlink():
            return folder in going
    return False


def _remove(root: Path, rel: str, kept_dirs: set[str]) -> None:
    """Delete ``rel`` and then its parent folders that are empty and absent from the
    checkpoint."""
    target = root / rel
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.is_dir() and not any(target.iterdir()):
        target.rmdir()
    parent = Path(rel).parent
    while parent.parts and parent.as_posix() not in kept_dirs:
        try:
            (root / parent).rmdir()
        except OSError:  # not empty (or already gone): stop climbing
            break
        parent = parent.parent


def _checkout(repo: git.Repo, commit: str, paths: list[str]) -> None:
    """Write ``paths`` from ``commit`` into the work tree the way a checkout would (modes,
    symbolic links, line-ending and smudge filters) without touching the real index."""
    with temp_index(repo, seed=False) as env:
        run_git(repo, "read-tree", commit, env=env)
        listing = Path(env["GIT_INDEX_FILE"]).with_name(f"paths-{secrets.token_hex(4)}")
        # fsencode: a name that is not UTF-8 came from git as surrogate escapes (encoding it
        # as UTF-8 raised, and the undo ended in an internal error having restored nothing).
        listing.write_bytes(b"".join(os.fsencode(p) + b"\0" for p in paths))
        with listing.open("rb") as stdin:
            # --stdin: no limit on the number of paths; -f: replace what is there now.
            run_git(repo, "checkout-index", "-f", "-z", "--stdin", env=env, istream=stdin)
