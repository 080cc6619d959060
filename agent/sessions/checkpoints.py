"""Checkpoints: snapshots of the user's working tree in private refs, so a task can be undone.

A snapshot is a commit of the whole working tree (tracked files, staged or not, and untracked
files that are not ignored) built through a temporary index file, stored under
``refs/agent/checkpoints/<session>/<task>``. Taking one never changes HEAD, the branch, the real
index, the stash or any file. Restoring rewrites only the files the task changed.

A snapshot of files cannot hold what git keeps beside them, and a model with a shell can run git
(a field trial: `git reset -q && git stash drop -q`; undo brought the files back, but the
user's stash entry was gone for good and a staged file was unstaged, and nothing said so). So
:func:`record_git_state` keeps the staged state and the stash entries on a ref of their own,
and :func:`restore_git_state` puts back what the task dropped.

What a snapshot covers is pinned when the task starts, whatever the ignore rules say later. A
task may rewrite ``.gitignore`` (a field trial: ``.env`` un-ignored, so the "after" snapshot
held the user's secret, `agent diff` showed it as a new file and `agent undo` deleted it). So
a snapshot taken *since* an earlier one (the task's end since its start, the state an undo or a
diff compares with) leaves out every path that was ignored, and not tracked, when the earlier
one was taken (its record of them is in its commit message, :class:`Outside`), and keeps every
path the earlier one holds, even where the rules now ignore it. Such files are never stored,
restored or removed: an undo cannot bring back content it never saw, and must not delete a
file that was there before the task.

A nested git repository (a submodule, or a clone or `git init` inside the work tree) is a
gitlink to git, its files invisible to a snapshot of the outer tree: a task that overwrote
``vendor/lib.py`` showed "(no changes)" and the user's uncommitted edit there was lost, and a
nested repository without a commit made `git add` fail the run. So each nested repository is
snapshotted in its own object store, on the same ref name, and the outer snapshot's gitlink
points at that snapshot; diffs and restores follow the gitlinks, so ``vendor/lib.py`` is
compared, shown and restored like any other file.

An untracked file larger than the task's limit (``checkpoint_max_file_mb``, 10 MiB by default,
as Codex's snapshots have it) is not stored: a 200 MB ``weights.bin`` rewritten between tasks
grew ``.git`` by 190 MB a task. The snapshot records its size and modification time instead
(:class:`Outside`; no digest, which would read the whole file every time) and an undo never
writes or removes one that was there when the task started; if the task changed it, the undo
says it cannot bring it back. One the task created (or grew from a small one) is removed (or
written back) like any other file, while it is still as the task left it.

A file that cannot be read (another user's, mode 0600: a container's output) is left out of
the snapshot (:attr:`Outside.unreadable`), and a restore or diff leaves it alone, with a note:
never stored, shown, restored or removed. `git add` failed on it ("unable to index file"), and
every run in the repository ended in exit 3. An untracked one stays out while it is there, for
the rest of the session.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import git
import psutil

from agent.errors import UserError
from tools.workspace import display_name

REF_PREFIX = "refs/agent/checkpoints"
AGENT_NAME = "dflash-agent"
AGENT_EMAIL = "dflash-agent@localhost"
# Snapshots are private bookkeeping: always the agent's identity, whatever the user configured.
AGENT_IDENTITY = {
    "GIT_AUTHOR_NAME": AGENT_NAME, "GIT_AUTHOR_EMAIL": AGENT_EMAIL,
    "GIT_COMMITTER_NAME": AGENT_NAME, "GIT_COMMITTER_EMAIL": AGENT_EMAIL,
}
NULL_MODE = "000000"
GITLINK_MODE = "160000"
_REF_PIECE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")
# (state file or folder in the git dir, what is in progress, how to finish it)
_IN_PROGRESS = (
    ("rebase-merge", "a rebase", "`git rebase --continue` or `git rebase --abort`"),
    ("rebase-apply/applying", "a `git am`", "`git am --continue` or `git am --abort`"),
    ("rebase-apply", "a rebase", "`git rebase --continue` or `git rebase --abort`"),
    ("MERGE_HEAD", "a merge", "commit the merge or run `git merge --abort`"),
    ("CHERRY_PICK_HEAD", "a cherry-pick",
     "`git cherry-pick --continue` or `git cherry-pick --abort`"),
    ("REVERT_HEAD", "a revert", "`git revert --continue` or `git revert --abort`"),
)


class RepoStateError(UserError):
    """The repository cannot be checkpointed as it is; the message says what to do."""


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


def open_repo(path: Path) -> git.Repo:
    """The repository containing ``path`` (parent folders are searched).

    Raises :class:`RepoStateError` when ``path`` is not an existing directory, not inside a
    work tree, or when a merge, rebase, ``git am``, cherry-pick or revert is in progress (a
    snapshot would capture conflict markers and a restore would fight with git).
    """
    if not Path(path).expanduser().is_dir():
        raise RepoStateError(f"{path} does not exist or is not a directory")
    if shutil.which(git.Git.GIT_PYTHON_GIT_EXECUTABLE or "git") is None:
        raise RepoStateError("git is not installed (no `git` on PATH); install it",
                             cli_hint=", or pass --no-git to work without checkpoints",
                             mcp_hint=" (run_task works in git repositories only)")
    try:
        repo = git.Repo(Path(path).expanduser().resolve(), search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise RepoStateError(f"{path} is not inside a git repository; run `git init` there",
                             cli_hint=" or pass --no-git",
                             mcp_hint=" (run_task works in git repositories only)") from None
    if repo.bare or repo.working_tree_dir is None:
        raise RepoStateError(f"{repo.git_dir} is a bare repository with no files to work on; "
                             "clone it", cli_hint=" or pass --no-git",
                             mcp_hint=" and give run_task the clone")
    git_dir = Path(repo.git_dir)
    sweep_temp_indexes(git_dir)
    for name, what, finish in _IN_PROGRESS:
        if (git_dir / name).exists():
            raise RepoStateError(f"{what} is in progress in {repo.working_tree_dir}; finish it "
                                 f"({finish}), then retry", cli_hint=", or pass --no-git")
    return repo


def checkpoint_ref(session_id: str, task: int, suffix: str = "") -> str:
    """``refs/agent/checkpoints/<session>/<task>`` or, with a suffix, ``.../<task>-<suffix>``.

    The suffix is joined with ``-`` rather than ``/`` because a ref cannot also be a folder of
    refs. Raises :class:`ValueError` when a piece would make an invalid ref name.
    """
    for piece in (session_id, suffix) if suffix else (session_id,):
        if not _REF_PIECE.fullmatch(piece) or ".." in piece or piece.endswith((".", ".lock")):
            raise ValueError(f"{piece!r} cannot be part of a git ref name")
    if task < 0:
        raise ValueError(f"task number {task} is negative")
    return f"{REF_PREFIX}/{session_id}/{task}" + (f"-{suffix}" if suffix else "")


@dataclass
class Outside:
    """The paths a snapshot left out on purpose, kept in its commit message (a JSON paragraph)
    so that every later snapshot of the task leaves them out too.

    ``ignored``: files and folders (ending in ``/``) that were ignored and untracked when the
    snapshot was taken, as `git status --ignored=matching` names them (a folder an ignore
    pattern matches, not each file in it), and those an earlier snapshot of the chain left out
    that still exist."""

    ignored: set[str] = field(default_factory=set)
    large: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Untracked files over :attr:`limit`, left out: ``{path: (size, mtime in ns)}``."""
    limit: int | None = None
    """The size in bytes above which an untracked file is left out (None: no limit); later
    snapshots of the task keep it, so they leave out the same files."""
    unreadable: set[str] = field(default_factory=set)
    """Files that could not be read when this snapshot was taken (untracked ones: or when an
    earlier snapshot of the chain was, while they exist), left out of it; a restore and a diff
    leave them alone."""

    def covers(self, path: str) -> bool:
        """Whether ``path`` is one of :attr:`ignored` or lies in one of its folders."""
        if path in self.ignored or path + "/" in self.ignored:
            return True
        parts = path.split("/")
        return any("/".join(parts[:n]) + "/" in self.ignored for n in range(1, len(parts)))

    def message(self) -> str:
        """The paragraph that records this in a snapshot's commit message."""
        return json.dumps({"outside": {"ignored": sorted(self.ignored),
                                       "large": {p: list(v) for p, v in sorted(
                                           self.large.items())},
                                       "limit": self.limit,
                                       "unreadable": sorted(self.unreadable)}})


def snapshot(repo: git.Repo, ref: str, message: str, since: str | None = None,
             max_file: int | None = None) -> str:
    """Commit the whole working tree and point ``ref`` at it; returns the commit's sha.

    ``since``: an earlier snapshot of the same work (the task's start, for its end): paths it
    left out stay out and paths it holds stay in, whatever the ignore rules say now (see the
    module's notes). ``max_file``: untracked files larger than this many bytes are left out,
    by size and time (default: ``since``'s limit; none without it). The parent is HEAD when
    there is one (an unborn branch gives a root commit). Files that cannot be read are left
    out (:attr:`Outside.unreadable`). Raises :class:`RepoStateError` when git cannot read the
    tree (a broken index).
    """
    return _commit_snapshot(repo, message, since, ref, max_file)


def _commit_snapshot(repo: git.Repo, message: str, since: str | None, ref: str | None,
                     max_file: int | None = None) -> str:
    """:func:`snapshot`, with ``ref`` optional: a snapshot only compared with (a diff's view of
    now) needs no ref, but a nested repository's part of it still needs a commit."""
    tree, outside = _write_tree(repo, since, ref, message, max_file)
    head = _head(repo)
    parents = ["-p", head] if head else []
    # On stdin: the record of ignored files can outgrow what one argument may hold (128 KiB
    # on Linux), and the commit would fail with E2BIG.
    sha = _git_in(repo, "commit-tree", "--no-gpg-sign", *parents, tree, env=AGENT_IDENTITY,
                  stdin=f"{message}\n\n{outside.message()}\n").strip()
    if ref:
        _git(repo, "update-ref", "-m", message, ref, sha)
    return sha


def outside_of(repo: git.Repo, commit: str) -> Outside:
    """What the snapshot ``commit`` left out (empty for one older than this record, or a
    commit that is no snapshot)."""
    try:
        text = _git(repo, "cat-file", "commit", commit)
    except RepoStateError:
        return Outside()
    last = text.rstrip("\n").rsplit("\n\n", 1)[-1]
    try:
        record = json.loads(last)["outside"]
        limit = record.get("limit")
        return Outside(ignored=set(record.get("ignored", ())),
                       large={p: (int(v[0]), int(v[1]))
                              for p, v in record.get("large", {}).items()},
                       limit=int(limit) if limit is not None else None,
                       unreadable=set(record.get("unreadable", ())))
    except (ValueError, KeyError, TypeError, AttributeError, IndexError):
        return Outside()


def changed_paths(repo: git.Repo, a: str, b: str) -> list[str]:
    """Sorted paths that differ between two commits or trees (added, modified, deleted,
    or only the file mode changed)."""
    return sorted(entry[4] for entry in _raw_entries(repo, a, b))


def diff(repo: git.Repo, checkpoint: str, until: str | None = None,
         since: str | None = None, leave_out: Sequence[str] = (),
         notes: list[str] | None = None) -> str:
    """Unified diff from ``checkpoint`` to ``until`` (another checkpoint) or, without it, to
    the current working tree, taken :func:`snapshot`'s way ``since`` the given snapshot
    (default: ``checkpoint``), without the files ``leave_out`` names; ``""`` when
    unchanged. A large untracked file that changed, or one that could not be read (see
    :class:`Outside`), has no content to show: it is left out, and ``notes`` gets a line on
    it."""
    current = until or _commit_snapshot(repo, "dflash-agent: the working tree now",
                                        since or checkpoint, None)
    flat = _flat_diff(repo, checkpoint, current)
    then, later = _large_of(flat, 0), _large_of(flat, 1)
    big = sorted(p for p in then.keys() | later.keys() if then.get(p) != later.get(p))
    unread = sorted(_unreadable_of(flat, 0) | _unreadable_of(flat, 1))
    if notes is not None:
        notes += [f"note: {display_name(p)} is not shown: an untracked file too large to "
                  f"checkpoint ({(later.get(p) or then[p])[0]:,} bytes)" for p in big]
        notes += [f"note: {display_name(p)} is not shown: it could not be read" for p in unread]
    return _diff_text(repo, checkpoint, current, "", {*leave_out, *big, *unread})


def changed_files(repo: git.Repo, a: str, b: str | None = None,
                  since: str | None = None) -> list[str]:
    """Sorted files that differ between the snapshots ``a`` and ``b`` (without it: the working
    tree now, taken ``since`` the given snapshot, default ``a``), nested repositories' files
    included."""
    current = b or _write_tree(repo, since or a)[0]
    return sorted(_flat_diff(repo, a, current).changes)


def _diff_text(repo: git.Repo, a: str, b: str, prefix: str, leave_out: set[str]) -> str:
    """git's diff of ``a`` and ``b`` with paths under ``prefix``, then each nested repository's
    part of it (a gitlink's own line, "Subproject commit", says nothing about the files);
    paths in ``leave_out`` (from the outer work tree) are left out."""
    mine = [p[len(prefix):] for p in leave_out if p.startswith(prefix)]
    specs = [f":(exclude,literal){p}" for p in mine]
    text = _git(repo, "diff", "--no-color", "--no-ext-diff", "--ignore-submodules=all",
                f"--src-prefix=a/{prefix}", f"--dst-prefix=b/{prefix}", a, b, "--", *specs)
    for mode_a, mode_b, sha_a, sha_b, path in _raw_entries(repo, a, b):
        if GITLINK_MODE not in (mode_a, mode_b):
            continue
        sub = _open_nested(Path(repo.working_tree_dir) / path)
        ends = [sha if mode == GITLINK_MODE else None
                for mode, sha in ((mode_a, sha_a), (mode_b, sha_b))]
        if sub is not None and all(end is None or _has_commit(sub, end) for end in ends):
            empty = _empty_tree(sub)
            text += _diff_text(sub, ends[0] or empty, ends[1] or empty, f"{prefix}{path}/",
                               leave_out)
    return text


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
    now = _commit_snapshot(repo, "dflash-agent: the working tree now", after or before, None)
    return _plan(repo, before, after, now, agent_wrote)[0]


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
                kept_dirs |= {prefix + d for d in _lines(_git(
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


def record_git_state(repo: git.Repo, ref: str, message: str) -> str:
    """Keep the staged state and every stash entry in a commit at ``ref``; returns its sha.

    The commit's tree is the real index written as a tree (through a copy, so the user's index
    is never locked or rewritten) and its parents are the stash entries: a `git stash drop` or
    `clear` then cannot make them unreachable, which `git gc` would delete. The message ends
    in JSON with each entry's sha and message (the stash's reflog holds the messages, and a
    drop deletes them) and whether the index could be written (not with unmerged entries).
    """
    try:
        index: str | None = _index_tree(repo)
    except RepoStateError:
        index = None
    stash = _stash_entries(repo)
    parents = [arg for sha in dict.fromkeys(sha for sha, _ in stash) for arg in ("-p", sha)]
    record = json.dumps({"index": index is not None, "stash": stash})
    sha = _git(repo, "commit-tree", "--no-gpg-sign", *parents, "-m", message, "-m", record,
               index or _empty_tree(repo), env=AGENT_IDENTITY).strip()
    _git(repo, "update-ref", "-m", message, ref, sha)
    return sha


def restore_git_state(repo: git.Repo, before_ref: str, after_ref: str,
                      plan: RestorePlan, head: str | None = None) -> None:
    """Put back the stash entries and the staged state that a task changed, recorded by
    :func:`record_git_state` at ``before_ref`` and ``after_ref`` (when the task started and
    ended); fills ``plan``'s ``stash_restored``, ``index_restored`` (``index_unstaged``: those
    whose entry is now ``head``'s, the tree HEAD had when the task started) and
    ``not_restored``.

    An entry counts as dropped by the task when it was in the stash at the start and is missing
    at the end (or the end was never recorded) and now: one the user dropped after the agent
    finished stays dropped. Entries go back on top of the stash, deepest first, so they keep
    their order (a `git stash clear`, or a drop or pop of the top, comes back exactly). A path's
    index entry is put back only while it is still as the agent left it: staging the user did
    afterwards is never overwritten. Without ``before_ref`` (a session older than these refs)
    nothing is done.
    """
    before = _read_state(repo, before_ref)
    if before is None:
        return
    after = _read_state(repo, after_ref)
    _restore_stash(repo, before, after, plan)
    _restore_index(repo, before, after, plan)
    if head is not None and plan.index_restored and before.index is not None:
        staged = set(changed_paths(repo, head, before.index))
        plan.index_unstaged = [p for p in plan.index_restored if p not in staged]


def preexisting_changes(repo: git.Repo, before: str, after: str) -> list[str]:
    """The files the task changed (``before`` → ``after``) that the user had already modified
    when it started: :func:`commit_task` leaves them out unless asked, and the user must be
    told, or a commit of half a change reads as the whole of it."""
    return sorted(_committable(repo, before, after)
                  & _committable(repo, parent_or_empty(repo, before), before))


def commit_task(repo: git.Repo, before: str, after: str, message: str,
                include_preexisting: bool = False) -> str | None:
    """Commit the task's files on the current branch (or detached HEAD); returns the new sha,
    or ``None`` when there is nothing to commit.

    The files are those changed between ``before`` and ``after`` in this repository (a nested
    repository's files are its own to commit; its gitlink only where its HEAD moved), minus —
    unless
    ``include_preexisting`` — those the user had already modified when the task started
    (they differ between the snapshot's parent, i.e. HEAD at that time, and ``before``).
    Their current content is committed; other staged changes stay staged and uncommitted.
    The user's identity is used, or the agent's when none is configured; commit hooks run.
    Raises :class:`RepoStateError` when git refuses the commit (a hook, signing).
    """
    files = _committable(repo, before, after)
    if not include_preexisting:
        files -= _committable(repo, parent_or_empty(repo, before), before)
    if not files:
        return None
    root = Path(repo.working_tree_dir)
    # Paths are file names, not patterns (a file may be called `*.py`).
    env = {"GIT_LITERAL_PATHSPECS": "1"}
    known = set(_lines(_git(repo, "ls-files", "-z", "--cached", "--", *files, env=env)))
    head = _head(repo)
    if head:
        known |= set(_lines(_git(repo, "ls-tree", "-r", "-z", "--name-only", head, "--", *files,
                                 env=env)))
    # A path neither on disk nor known to git (created, then removed again) is skipped:
    # `git add` would reject the whole command for it.
    paths = sorted(p for p in files if p in known or os.path.lexists(root / p))
    if not paths:
        return None
    _git(repo, "add", "-A", "--", *paths, env=env)
    # Only paths that now differ from HEAD: a path in neither HEAD nor the index (a staged new
    # file the task deleted) would make `git commit -- <paths>` fail.
    base = head or _empty_tree(repo)
    paths = _lines(_git(repo, "diff-index", "--cached", "-z", "--name-only", "--no-renames",
                        base, "--", *paths, env=env))
    if not paths:
        return None
    env |= _identity_fallback(repo)
    _git(repo, "commit", "-q", "-m", message, "--only", "--", *paths, env=env)
    return _head(repo)


# --- helpers -------------------------------------------------------------------------------


def _git(repo: git.Repo, *args: str, env: dict[str, str] | None = None,
         istream: object = None) -> str:
    """Run git in the work tree; its failure becomes :class:`RepoStateError` with git's words."""
    try:
        return repo.git.execute([repo.git.GIT_PYTHON_GIT_EXECUTABLE, *args], env=env,
                                istream=istream, strip_newline_in_stdout=False)
    except git.GitCommandError as exc:
        # The command's name, not a `-c name=value` before it ("`git -c` failed").
        words = [a for i, a in enumerate(args) if a != "-c" and (i == 0 or args[i - 1] != "-c")]
        raise RepoStateError(f"`git {words[0]}` failed in {repo.working_tree_dir}: "
                             f"{_detail(exc)}; fix that and retry",
                             cli_hint=", or pass --no-git") from exc


def _failure(repo: git.Repo, *args: str, env: dict[str, str] | None = None) -> str:
    """Run git for a step the user can also take by hand: ``""`` when it worked, else git's
    words on why not (the caller reports them with the command)."""
    try:
        repo.git.execute([repo.git.GIT_PYTHON_GIT_EXECUTABLE, *args], env=env)
    except git.GitCommandError as exc:
        return _detail(exc)
    return ""


def _detail(exc: git.GitCommandError) -> str:
    """What git said on stderr, without GitPython's wrapping."""
    return (exc.stderr or "").strip().removeprefix("stderr:").strip(" '\n") or str(exc)


def _lines(output: str) -> list[str]:
    """Split ``-z`` output into its entries."""
    return [item for item in output.split("\0") if item]


def _head(repo: git.Repo) -> str | None:
    """HEAD's sha, or ``None`` on an unborn branch."""
    return repo.head.commit.hexsha if repo.head.is_valid() else None


def _empty_tree(repo: git.Repo) -> str:
    """The empty tree's id (sha1 or sha256, whatever the repo uses)."""
    return _git(repo, "mktree").strip()


def commits_since(repo: git.Repo, snapshot: str, limit: int = 3) -> list[str]:
    """Commits HEAD has gained since ``snapshot`` was taken (its parent was HEAD then), as
    ``<short sha> <subject>``, newest first, at most ``limit``; empty when HEAD has not moved
    or the history cannot be read."""
    try:
        parents = repo.commit(snapshot).parents
        since = f"{parents[0].hexsha}..HEAD" if parents else "HEAD"
        listed = repo.git.log("--format=%h %s", f"-{limit}", since)
    except (git.GitError, ValueError):
        return []
    return [line for line in listed.splitlines() if line.strip()]


def parent_or_empty(repo: git.Repo, commit: str) -> str:
    """The first parent of ``commit`` (HEAD when it was snapshotted), else the empty tree."""
    parents = repo.commit(commit).parents
    return parents[0].hexsha if parents else _empty_tree(repo)


_TEMP_INDEX = "dflash-agent-index-"
_STALE_S = 3600.0


def sweep_temp_indexes(git_dir: Path) -> list[Path]:
    """Remove temporary index folders that a killed run left in ``git_dir``; returns them.

    A folder is left alone while the process named in it (``dflash-agent-index-<pid>-…``) is
    alive and the folder is younger than an hour (another session may be snapshotting right
    now); folders without a pid (older versions) go once they are an hour old.
    """
    removed = []
    now = time.time()
    for folder in git_dir.glob(f"{_TEMP_INDEX}*"):
        pid = folder.name[len(_TEMP_INDEX):].split("-", 1)[0]
        try:
            young = now - folder.stat().st_mtime < _STALE_S
        except OSError:
            continue
        if young and (not pid.isdigit() or psutil.pid_exists(int(pid))):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


@contextmanager
def _temp_index(repo: git.Repo, seed: bool) -> Iterator[dict[str, str]]:
    """Environment pointing git at a private index file inside the git dir (outside the work
    tree, so `git add -A` cannot pick it up), seeded from the real index when ``seed``;
    removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=f"{_TEMP_INDEX}{os.getpid()}-", dir=repo.git_dir))
    try:
        index = folder / "index"
        real = Path(repo.index.path)
        # Seeding keeps tracked-but-ignored files and the cached stat data (so unchanged files
        # are not hashed again); the real index is only read.
        if seed and real.is_file():
            shutil.copyfile(real, index)
        yield {"GIT_INDEX_FILE": str(index)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# No split index: writing one could create or expire shared index files in the git dir.
_NO_SPLIT = ("-c", "core.splitIndex=false")


def _write_tree(repo: git.Repo, since: str | None = None, ref: str | None = None,
                message: str = "dflash-agent: the working tree now",
                max_file: int | None = None) -> tuple[str, Outside]:
    """Tree id of the whole working tree as `git add -A` sees it, via a temporary index, and
    what it left out; ``since`` and ``max_file``: see :func:`snapshot`. Each nested repository
    is snapshotted in itself (with ``message``, on ``ref`` when given) and linked by its
    gitlink."""
    prior = outside_of(repo, since) if since else Outside()
    limit = max_file if max_file is not None else prior.limit
    kept = _tree_entries(repo, since) if since else {}
    untracked, nested_dirs, ignored = _untracked_and_ignored(repo)
    root = Path(repo.working_tree_dir)
    with _temp_index(repo, seed=True) as env:
        index = _index_entries(repo, env)
        # What the earlier snapshot holds stays covered: a path the task's new ignore rule
        # hides is still compared (tracked in the temporary index, `add -A` updates it).
        missing = [(path, entry) for path, entry in kept.items() if path not in index]
        if missing:
            info = "".join(f"{mode} {sha}\t{path}\0" for path, (mode, sha) in missing)
            _git_in(repo, *_NO_SPLIT, "update-index", "--add", "--replace", "-z",
                    "--index-info", env=env, stdin=info)
        # What it left out stays out, tracked or not now (the task may `git add` it: the
        # file was there before the task, and an undo must not delete it).
        excluded = {path for path in {*untracked, *index}
                    if prior.ignored and path not in kept and prior.covers(path)}
        # Nested repositories, untracked or submodules, each in a snapshot of its own: `add`
        # would record only their HEAD (and fails on one without a commit).
        nested = sorted(path for path in nested_dirs | {p for p, mode in index.items()
                                                         if mode == GITLINK_MODE}
                        if path not in excluded and os.path.lexists(root / path / ".git"))
        # Untracked files over the limit, the earlier snapshot's too, by size and time only.
        large = {} if limit is None else _large_files(
            root, ({*untracked, *kept} - set(index)) - excluded - set(nested), limit)
        excluded |= set(large)
        # Unreadable, now or when an earlier snapshot of the task was taken: `add` would fail.
        unreadable = {path for path in prior.unreadable
                      if path not in kept and os.path.lexists(root / path)}
        unreadable |= _unreadable(root, untracked - set(kept) - excluded - set(nested))
        excluded |= unreadable
        dropped = [path for path in excluded if path in index or path in kept]
        if dropped:
            _git_in(repo, *_NO_SPLIT, "update-index", "--force-remove", "-z", "--stdin",
                    env=env, stdin="".join(f"{path}\0" for path in dropped))
        specs = ["."] + [f":(exclude,literal){path}" for path in [*sorted(excluded), *nested]]
        try:
            _add_all(repo, env, specs)
        except RepoStateError:
            # A file git tracks or the earlier snapshot holds that can no longer be read: it
            # is left out too (its old content would be a lie), found only when `add` fails,
            # as checking every file on every snapshot would cost a read of each.
            stuck = _unreadable(root, {*index, *kept, *untracked} - excluded - set(nested))
            if not stuck:
                raise
            unreadable |= stuck
            _git_in(repo, *_NO_SPLIT, "update-index", "--force-remove", "-z", "--stdin",
                    env=env, stdin="".join(f"{path}\0" for path in stuck))
            _add_all(repo, env, specs + [f":(exclude,literal){path}" for path in stuck])
        links = []
        for path in nested:
            sub = _open_nested(root / path)
            if sub is None:
                continue
            sweep_temp_indexes(Path(sub.git_dir))
            mode, sha = kept.get(path, ("", ""))
            sub_since = sha if mode == GITLINK_MODE and _has_commit(sub, sha) else None
            sub_sha = _commit_snapshot(sub, message, sub_since, ref, limit)
            links.append(f"{GITLINK_MODE} {sub_sha}\t{path}\0")
        if links:
            _git_in(repo, *_NO_SPLIT, "update-index", "--add", "--replace", "-z",
                    "--index-info", env=env, stdin="".join(links))
        tree = _git(repo, "write-tree", env=env).strip()
    # Recorded for the next snapshot: what is ignored now, and what was left out before and
    # is still there (a file the task un-ignored stays out for the rest of the task).
    outside = Outside({entry for entry in ignored if entry not in kept}
                      | {entry for entry in prior.ignored
                         if os.path.lexists(root / entry.rstrip("/"))}, large, limit,
                      unreadable)
    return tree, outside


def _large_files(root: Path, paths: set[str], limit: int) -> dict[str, tuple[int, int]]:
    """``{path: (size, mtime in ns)}`` of those of ``paths`` that are regular files larger
    than ``limit`` bytes."""
    found = {}
    for path in paths:
        try:
            info = os.lstat(root / path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            found[path] = (info.st_size, info.st_mtime_ns)
    return found


def _add_all(repo: git.Repo, env: dict[str, str], specs: list[str]) -> None:
    """`git add -A` of the pathspecs ``specs`` into the index ``env`` names."""
    _git_in(repo, *_NO_SPLIT, "-c", "advice.addEmbeddedRepo=false", "add", "-A",
            "--pathspec-from-file=-", "--pathspec-file-nul", env=env,
            stdin="".join(f"{spec}\0" for spec in specs))


def _unreadable(root: Path, paths: set[str]) -> set[str]:
    """Those of ``paths`` that are regular files this process may not open for reading."""
    found = set()
    for path in paths:
        full = root / path
        try:
            regular = stat.S_ISREG(os.lstat(full).st_mode)
        except OSError:
            continue
        try:
            os.close(os.open(full, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW))
        except PermissionError:
            if regular:
                found.add(path)
        except OSError:
            pass
    return found


def _git_in(repo: git.Repo, *args: str, stdin: str, env: dict[str, str] | None = None) -> str:
    """:func:`_git` with ``stdin`` as its input, names that are not UTF-8 as their bytes (they
    came from git as surrogate escapes). Through a file: git's stdin must be a real one."""
    with tempfile.TemporaryFile() as data:
        data.write(stdin.encode("utf-8", "surrogateescape"))
        data.seek(0)
        return _git(repo, *args, env=env, istream=data)


def _tree_entries(repo: git.Repo, commit: str) -> dict[str, tuple[str, str]]:
    """``{path: (mode, sha)}`` of every file, link and gitlink in ``commit``'s tree."""
    found = {}
    for item in _lines(_git(repo, "ls-tree", "-r", "-z", "--full-tree", commit)):
        meta, path = item.split("\t", 1)
        mode, _, sha = meta.split(" ")
        found[path] = (mode, sha)
    return found


def _index_entries(repo: git.Repo, env: dict[str, str]) -> dict[str, str]:
    """``{path: mode}`` of the index ``env`` points git at."""
    found = {}
    for item in _lines(_git(repo, "ls-files", "-s", "-z", env=env)):
        meta, path = item.split("\t", 1)
        found[path] = meta.split(" ")[0]
    return found


def _untracked_and_ignored(repo: git.Repo) -> tuple[set[str], set[str], set[str]]:
    """The untracked paths that are not ignored, the untracked nested repositories among them
    (as their folders, without the trailing ``/``) and the ignored paths (a folder an ignore
    pattern matches ending in ``/``, not each file in it), as `git status` sees them now; the
    index is only read."""
    untracked, nested, ignored = set(), set(), set()
    out = _git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all",
               "--ignored=matching", "--no-renames", "--ignore-submodules=all",
               env={"GIT_OPTIONAL_LOCKS": "0"})
    for item in _lines(out):
        code, path = item[:2], item[3:]
        if code == "??":
            untracked.add(path.rstrip("/"))
            if path.endswith("/"):  # with --untracked-files=all only a repository is a folder
                nested.add(path.rstrip("/"))
        elif code == "!!":
            ignored.add(path)
    return untracked, nested, ignored


@dataclass
class _GitState:
    """What :func:`record_git_state` kept: the index as a tree (``None``: it had unmerged
    entries) and the stash entries as ``[sha, message]``, top first."""

    index: str | None
    stash: list[list[str]]


def _index_tree(repo: git.Repo) -> str:
    """Tree id of the real index, written from a copy of it."""
    with _temp_index(repo, seed=True) as env:
        return _git(repo, *_NO_SPLIT, "write-tree", env=env).strip()


def _stash_entries(repo: git.Repo) -> list[list[str]]:
    """``[sha, message]`` of every stash entry, ``stash@{0}`` first."""
    return [entry.split(" ", 1)
            for entry in _lines(_git(repo, "stash", "list", "-z", "--format=%H %gs"))]


def _read_state(repo: git.Repo, ref: str) -> _GitState | None:
    """The state recorded at ``ref``; ``None`` when there is no such ref."""
    try:
        commit = repo.commit(repo.git.rev_parse("--verify", "-q", f"{ref}^{{commit}}"))
    except (git.GitCommandError, ValueError):
        return None
    record = json.loads(str(commit.message).rsplit("\n\n", 1)[1])
    return _GitState(commit.tree.hexsha if record["index"] else None, record["stash"])


def _restore_stash(repo: git.Repo, before: _GitState, after: _GitState | None,
                   plan: RestorePlan) -> None:
    now = {sha for sha, _ in _stash_entries(repo)}
    kept = {sha for sha, _ in after.stash} if after is not None else set()
    dropped = [(sha, text) for sha, text in before.stash if sha not in now | kept]
    stored = set()
    for sha, text in reversed(dropped):
        command = ["git", "stash", "store", "-m", text, sha]
        failed = _failure(repo, *command[1:])
        if failed:
            plan.not_restored.append(f"the stash entry '{text}' ({sha[:12]}), dropped by the "
                                     f"task, could not be stored again ({failed}): "
                                     f"`{shlex.join(command)}` does it")
        else:
            stored.add(sha)
    plan.stash_restored = [f"stash@{{{n}}}: {text}"
                           for n, (sha, text) in enumerate(_stash_entries(repo))
                           if sha in stored]


def _restore_index(repo: git.Repo, before: _GitState, after: _GitState | None,
                   plan: RestorePlan) -> None:
    if before.index is None or after is None or after.index is None:
        return  # unmerged at either end: there is no staged state to compare
    moved = changed_paths(repo, before.index, after.index)
    if not moved:
        return
    try:
        edited = set(changed_paths(repo, after.index, _index_tree(repo)))
    except RepoStateError:  # unmerged entries now: the user is in the middle of something
        edited = set(moved)
    put_back = [p for p in moved if p not in edited]
    left = [p for p in moved if p in edited]
    # Paths are file names, not patterns (a file may be called `*.py`).
    command = ["git", "--literal-pathspecs", "reset", "-q", before.index, "--"]
    if put_back:
        failed = _failure(repo, *command[1:], *put_back)
        if failed:
            plan.not_restored.append(f"the staged state of {', '.join(put_back)}, changed by "
                                     f"the task, could not be put back ({failed}): "
                                     f"`{shlex.join(command + put_back)}` does it")
        else:
            plan.index_restored = put_back
    if left:
        plan.not_restored.append(f"the staged state of {', '.join(left)}, changed by the task, "
                                 "was changed again after the agent finished and is left as "
                                 f"it is: `{shlex.join(command + left)}` stages them as they "
                                 "were before the task")


def _raw_entries(repo: git.Repo, a: str, b: str,
                 recursive: bool = True) -> list[tuple[str, str, str, str, str]]:
    """``(mode a, mode b, sha a, sha b, path)`` for every path differing between ``a`` and
    ``b`` in this repository (mode ``000000``: absent on that side); ``recursive``: files in
    folders too, else the top level only."""
    items = _lines(_git(repo, "diff-tree", *(["-r"] if recursive else []), "-z",
                        "--no-renames", a, b))
    # Entries come in pairs: ":<mode a> <mode b> <sha a> <sha b> <status>", then the path.
    found = []
    for i in range(0, len(items), 2):
        mode_a, mode_b, sha_a, sha_b = items[i].lstrip(":").split(" ")[:4]
        found.append((mode_a, mode_b, sha_a, sha_b, items[i + 1]))
    return found


def _committable(repo: git.Repo, a: str, b: str) -> set[str]:
    """The paths :func:`commit_task` may commit of those differing between ``a`` and ``b``: a
    nested repository's gitlink only where its HEAD moved (a snapshot's gitlink names the
    nested snapshot, which differs whenever its files do; they are the nested repository's to
    commit, not this one's)."""
    return _split_changes(repo, a, b)[0]


def nested_changes(repo: git.Repo, before: str, after: str) -> list[str]:
    """Nested repositories (submodules, repositories cloned or made inside; paths relative to
    the root, sorted) whose files differ between the snapshots ``before`` and ``after`` while
    their HEAD stayed: what :func:`commit_task` leaves to be committed inside them."""
    linked = _split_changes(repo, before, after)[1]
    # A gitlink differs whenever a nested snapshot is taken again (a new commit), its files
    # the same or not: what counts is the files.
    changed = _flat_diff(repo, before, after).changes
    return sorted(p for p in linked if any(c.startswith(p + "/") for c in changed))


def _split_changes(repo: git.Repo, a: str, b: str) -> tuple[set[str], set[str]]:
    """The paths differing between ``a`` and ``b``: those this repository commits, and the
    nested repositories whose files alone changed."""
    root = Path(repo.working_tree_dir)
    own: set[str] = set()
    nested: set[str] = set()
    for mode_a, mode_b, sha_a, sha_b, path in _raw_entries(repo, a, b):
        if mode_a == mode_b == GITLINK_MODE and \
                _link_head(root / path, sha_a) == _link_head(root / path, sha_b):
            nested.add(path)
        else:
            own.add(path)
    return own, nested


def _link_head(path: Path, sha: str) -> str | None:
    """The commit a gitlink stands for: for a snapshot of the nested repository at ``path``,
    that repository's HEAD when it was taken (None: it had no commit); else ``sha`` itself."""
    sub = _open_nested(path)
    if sub is None or not _has_commit(sub, sha):
        return sha
    commit = sub.commit(sha)
    if commit.author.email != AGENT_EMAIL:
        return sha
    return commit.parents[0].hexsha if commit.parents else None


def _open_nested(path: Path) -> git.Repo | None:
    """The git repository whose work tree is ``path`` (a submodule, or one cloned or made
    there), or None where there is none that git can open."""
    if not os.path.lexists(path / ".git"):
        return None
    try:
        sub = git.Repo(path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None
    if sub.bare or sub.working_tree_dir is None:
        return None
    return sub


def _has_commit(repo: git.Repo, sha: str) -> bool:
    """Whether ``repo`` holds the commit ``sha``."""
    try:
        _git(repo, "cat-file", "-e", f"{sha}^{{commit}}")
    except RepoStateError:
        return False
    return True


def _plan(repo: git.Repo, before: str, after: str | None, current: str,
          agent_wrote: dict[str, str | None] | None = None) -> tuple[RestorePlan, _Flat]:
    """The plan of a restore to ``before`` (see :func:`plan_restore`), and what differs from
    ``before`` to ``after`` (to ``current`` without it), large files included: one that was
    there at ``before`` is never in the plan (a note says when it changed), and one that came
    or grew since is removed or written back from ``before`` (its end is None or a blob). A
    file one of the snapshots could not read is never in the plan (a note says so)."""
    end = after or current
    flat = _flat_diff(repo, before, end)
    since = _flat_diff(repo, after, current) if after else None
    then, later = _large_of(flat, 0), _large_of(flat, 1)
    stuck = _unreadable_of(flat, 0) | _unreadable_of(flat, 1) | (
        _unreadable_of(since, 1) if since else set())
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
    now = _large_of(since, 1)
    edited = set(since.changes) | {p for p, was in later.items() if now.get(p) != was}
    plan.conflicts = [p for p in plan.changed if p in edited]
    return plan, flat


def _unreadable_of(flat: _Flat, side: int) -> set[str]:
    """The files that the snapshots on ``side`` (0: ``a``, 1: ``b``) of ``flat`` could not
    read (see :class:`Outside`), by their paths from the outer work tree."""
    found = set()
    for prefix, (holder, *ends) in flat.holders.items():
        if ends[side] is not None:
            found |= {prefix + path for path in outside_of(holder, ends[side]).unreadable}
    return found


def _large_of(flat: _Flat, side: int) -> dict[str, tuple[int, int]]:
    """The large files (see :class:`Outside`) that the snapshots on ``side`` (0: ``a``, 1:
    ``b``) of ``flat`` left out, by their paths from the outer work tree."""
    found = {}
    for prefix, (holder, *ends) in flat.holders.items():
        if ends[side] is not None:
            found |= {prefix + path: info
                      for path, info in outside_of(holder, ends[side]).large.items()}
    return found


_End = tuple[str, str, str]
"""One side of a changed path: (mode, sha, the prefix of the repository holding it)."""


@dataclass
class _Flat:
    """What differs between two snapshots, nested repositories' files included: ``changes``
    maps each path (from the outer work tree) to its two ends (None: absent), and ``holders``
    each repository's prefix ("" for the outer one, "vendor/" …) to it and its two commits
    (None where it has none on that side)."""

    changes: dict[str, tuple[_End | None, _End | None]] = field(default_factory=dict)
    holders: dict[str, tuple[git.Repo, str | None, str | None]] = field(default_factory=dict)


def _flat_diff(repo: git.Repo, a: str, b: str, prefix: str = "",
               flat: _Flat | None = None) -> _Flat:
    """The paths that differ between ``a`` and ``b``, following gitlinks into the nested
    repositories' own snapshots (see the module's notes)."""
    top = flat is None
    flat = flat or _Flat()
    flat.holders[prefix] = (repo, a, b)

    def merge(path: str, old: _End | None, new: _End | None) -> None:
        known = flat.changes.get(path, (None, None))
        flat.changes[path] = (old or known[0], new or known[1])

    for mode_a, mode_b, sha_a, sha_b, path in _raw_entries(repo, a, b, recursive=True):
        full = prefix + path
        end_a = None if mode_a == NULL_MODE else (mode_a, sha_a, prefix)
        end_b = None if mode_b == NULL_MODE else (mode_b, sha_b, prefix)
        if GITLINK_MODE not in (mode_a, mode_b):
            merge(full, end_a, end_b)
            continue
        sub = _open_nested(Path(repo.working_tree_dir) / path)
        links = [sha if mode == GITLINK_MODE else None
                 for mode, sha in ((mode_a, sha_a), (mode_b, sha_b))]
        if sub is None or not all(link is None or _has_commit(sub, link) for link in links):
            merge(full, end_a, end_b)  # kept as a gitlink: restore reports it
            continue
        # A file at the path on the other side (a file replaced by a repository) stays a file.
        if not (links[0] and links[1]):
            merge(full, None if links[0] else end_a, None if links[1] else end_b)
        empty = _empty_tree(sub)
        _flat_diff(sub, links[0] or empty, links[1] or empty, full + "/", flat)
    if top:
        # A file that moved between repositories unchanged (a folder made a repository).
        flat.changes = {path: ends for path, ends in flat.changes.items()
                        if ends[0] is None or ends[1] is None or ends[0][:2] != ends[1][:2]}
    return flat


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
    with _temp_index(repo, seed=False) as env:
        _git(repo, "read-tree", commit, env=env)
        listing = Path(env["GIT_INDEX_FILE"]).with_name(f"paths-{secrets.token_hex(4)}")
        # fsencode: a name that is not UTF-8 came from git as surrogate escapes (encoding it
        # as UTF-8 raised, and the undo ended in an internal error having restored nothing).
        listing.write_bytes(b"".join(os.fsencode(p) + b"\0" for p in paths))
        with listing.open("rb") as stdin:
            # --stdin: no limit on the number of paths; -f: replace what is there now.
            _git(repo, "checkout-index", "-f", "-z", "--stdin", env=env, istream=stdin)


def _identity_fallback(repo: git.Repo) -> dict[str, str]:
    """The agent's identity for whichever of author and committer git cannot work out."""
    env: dict[str, str] = {}
    for role in ("AUTHOR", "COMMITTER"):
        try:
            repo.git.var(f"GIT_{role}_IDENT")
        except git.GitCommandError:
            env[f"GIT_{role}_NAME"] = AGENT_NAME
            env[f"GIT_{role}_EMAIL"] = AGENT_EMAIL
    return env
