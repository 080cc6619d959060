"""What a snapshot covers, and what it leaves out on purpose (:class:`Outside`).

What a snapshot covers is pinned when the task starts, whatever the ignore rules say later. A
task may rewrite ``.gitignore`` (a field trial: ``.env`` un-ignored, so the "after" snapshot
held the user's secret, `agent diff` showed it as a new file and `agent undo` deleted it). So
a snapshot taken *since* an earlier one (the task's end since its start, the state an undo or a
diff compares with) leaves out every path that was ignored, and not tracked, when the earlier
one was taken (its record of them is in its commit message, :class:`Outside`), and keeps every
path the earlier one holds, even where the rules now ignore it. Such files are never stored,
restored or removed: an undo cannot bring back content it never saw, and must not delete a
file that was there before the task.

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

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import git

from agent.sessions.checkpoints.plumbing import RepoStateError, run_git, split_z


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


def outside_of(repo: git.Repo, commit: str) -> Outside:
    """What the snapshot ``commit`` left out (empty for one older than this record, or a
    commit that is no snapshot)."""
    try:
        text = run_git(repo, "cat-file", "commit", commit)
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


def untracked_and_ignored(repo: git.Repo) -> tuple[set[str], set[str], set[str]]:
    """The untracked paths that are not ignored, the untracked nested repositories among them
    (as their folders, without the trailing ``/``) and the ignored paths (a folder an ignore
    pattern matches ending in ``/``, not each file in it), as `git status` sees them now; the
    index is only read."""
    untracked, nested, ignored = set(), set(), set()
    out = run_git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all",
               "--ignored=matching", "--no-renames", "--ignore-submodules=all",
               env={"GIT_OPTIONAL_LOCKS": "0"})
    for item in split_z(out):
        code, path = item[:2], item[3:]
        if code == "??":
            untracked.add(path.rstrip("/"))
            if path.endswith("/"):  # with --untracked-files=all only a repository is a folder
                nested.add(path.rstrip("/"))
        elif code == "!!":
            ignored.add(path)
    return untracked, nested, ignored


def large_files(root: Path, paths: set[str], limit: int) -> dict[str, tuple[int, int]]:
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


def unreadable_files(root: Path, paths: set[str]) -> set[str]:
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
