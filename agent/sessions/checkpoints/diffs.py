"""What a task changed, shown: the unified diff of two snapshots (or of one and the working
tree now), nested repositories' files included, and the files that differ."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import git

from agent.sessions.checkpoints.plumbing import GITLINK_MODE, empty_tree, run_git
from agent.sessions.checkpoints.snapshots import commit_snapshot, write_tree
from agent.sessions.checkpoints.tree import (
    flat_diff,
    has_commit,
    large_of,
    open_nested,
    raw_entries,
    unreadable_of,
)
from tools.workspace import display_name


def diff(repo: git.Repo, checkpoint: str, until: str | None = None,
         since: str | None = None, leave_out: Sequence[str] = (),
         notes: list[str] | None = None) -> str:
    """Unified diff from ``checkpoint`` to ``until`` (another checkpoint) or, without it, to
    the current working tree, taken :func:`snapshot`'s way ``since`` the given snapshot
    (default: ``checkpoint``), without the files ``leave_out`` names; ``""`` when
    unchanged. A large untracked file that changed, or one that could not be read (see
    :class:`Outside`), has no content to show: it is left out, and ``notes`` gets a line on
    it."""
    current = until or commit_snapshot(repo, "dflash-agent: the working tree now",
                                        since or checkpoint, None)
    flat = flat_diff(repo, checkpoint, current)
    then, later = large_of(flat, 0), large_of(flat, 1)
    big = sorted(p for p in then.keys() | later.keys() if then.get(p) != later.get(p))
    unread = sorted(unreadable_of(flat, 0) | unreadable_of(flat, 1))
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
    current = b or write_tree(repo, since or a)[0]
    return sorted(flat_diff(repo, a, current).changes)


def _diff_text(repo: git.Repo, a: str, b: str, prefix: str, leave_out: set[str]) -> str:
    """git's diff of ``a`` and ``b`` with paths under ``prefix``, then each nested repository's
    part of it (a gitlink's own line, "Subproject commit", says nothing about the files);
    paths in ``leave_out`` (from the outer work tree) are left out."""
    mine = [p[len(prefix):] for p in leave_out if p.startswith(prefix)]
    specs = [f":(exclude,literal){p}" for p in mine]
    text = run_git(repo, "diff", "--no-color", "--no-ext-diff", "--ignore-submodules=all",
                f"--src-prefix=a/{prefix}", f"--dst-prefix=b/{prefix}", a, b, "--", *specs)
    for mode_a, mode_b, sha_a, sha_b, path in raw_entries(repo, a, b):
        if GITLINK_MODE not in (mode_a, mode_b):
            continue
        sub = open_nested(Path(repo.working_tree_dir) / path)
        ends = [sha if mode == GITLINK_MODE else None
                for mode, sha in ((mode_a, sha_a), (mode_b, sha_b))]
        if sub is not None and all(end is None or has_commit(sub, end) for end in ends):
            empty = empty_tree(sub)
            text += _diff_text(sub, ends[0] or empty, ends[1] or empty, f"{prefix}{path}/",
                               leave_out)
    return text
