"""Two snapshots compared path by path, nested repositories' files included.

A nested git repository (a submodule, or a clone or `git init` inside the work tree) is a
gitlink to git, its files invisible to a snapshot of the outer tree: a task that overwrote
``vendor/lib.py`` showed "(no changes)" and the user's uncommitted edit there was lost, and a
nested repository without a commit made `git add` fail the run. So each nested repository is
snapshotted in its own object store, on the same ref name, and the outer snapshot's gitlink
points at that snapshot; diffs and restores follow the gitlinks (:func:`flat_diff`), so
``vendor/lib.py`` is compared, shown and restored like any other file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import git

from agent.sessions.checkpoints.coverage import outside_of
from agent.sessions.checkpoints.plumbing import (
    GITLINK_MODE,
    NULL_MODE,
    RepoStateError,
    empty_tree,
    run_git,
    split_z,
)


def changed_paths(repo: git.Repo, a: str, b: str) -> list[str]:
    """Sorted paths that differ between two commits or trees (added, modified, deleted,
    or only the file mode changed)."""
    return sorted(entry[4] for entry in raw_entries(repo, a, b))


def raw_entries(repo: git.Repo, a: str, b: str,
                 recursive: bool = True) -> list[tuple[str, str, str, str, str]]:
    """``(mode a, mode b, sha a, sha b, path)`` for every path differing between ``a`` and
    ``b`` in this repository (mode ``000000``: absent on that side); ``recursive``: files in
    folders too, else the top level only."""
    items = split_z(run_git(repo, "diff-tree", *(["-r"] if recursive else []), "-z",
                        "--no-renames", a, b))
    # Entries come in pairs: ":<mode a> <mode b> <sha a> <sha b> <status>", then the path.
    found = []
    for i in range(0, len(items), 2):
        mode_a, mode_b, sha_a, sha_b = items[i].lstrip(":").split(" ")[:4]
        found.append((mode_a, mode_b, sha_a, sha_b, items[i + 1]))
    return found


def open_nested(path: Path) -> git.Repo | None:
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


def has_commit(repo: git.Repo, sha: str) -> bool:
    """Whether ``repo`` holds the commit ``sha``."""
    try:
        run_git(repo, "cat-file", "-e", f"{sha}^{{commit}}")
    except RepoStateError:
        return False
    return True


End = tuple[str, str, str]
"""One side of a changed path: (mode, sha, the prefix of the repository holding it)."""


@dataclass
class Flat:
    """What differs between two snapshots, nested repositories' files included: ``changes``
    maps each path (from the outer work tree) to its two ends (None: absent), and ``holders``
    each repository's prefix ("" for the outer one, "vendor/" …) to it and its two commits
    (None where it has none on that side)."""

    changes: dict[str, tuple[End | None, End | None]] = field(default_factory=dict)
    holders: dict[str, tuple[git.Repo, str | None, str | None]] = field(default_factory=dict)


def flat_diff(repo: git.Repo, a: str, b: str, prefix: str = "",
               flat: Flat | None = None) -> Flat:
    """The paths that differ between ``a`` and ``b``, following gitlinks into the nested
    repositories' own snapshots (see the module's notes)."""
    top = flat is None
    flat = flat or Flat()
    flat.holders[prefix] = (repo, a, b)

    def merge(path: str, old: End | None, new: End | None) -> None:
        known = flat.changes.get(path, (None, None))
        flat.changes[path] = (old or known[0], new or known[1])

    for mode_a, mode_b, sha_a, sha_b, path in raw_entries(repo, a, b, recursive=True):
        full = prefix + path
        end_a = None if mode_a == NULL_MODE else (mode_a, sha_a, prefix)
        end_b = None if mode_b == NULL_MODE else (mode_b, sha_b, prefix)
        if GITLINK_MODE not in (mode_a, mode_b):
            merge(full, end_a, end_b)
            continue
        sub = open_nested(Path(repo.working_tree_dir) / path)
        links = [sha if mode == GITLINK_MODE else None
                 for mode, sha in ((mode_a, sha_a), (mode_b, sha_b))]
        if sub is None or not all(link is None or has_commit(sub, link) for link in links):
            merge(full, end_a, end_b)  # kept as a gitlink: restore reports it
            continue
        # A file at the path on the other side (a file replaced by a repository) stays a file.
        if not (links[0] and links[1]):
            merge(full, None if links[0] else end_a, None if links[1] else end_b)
        empty = empty_tree(sub)
        flat_diff(sub, links[0] or empty, links[1] or empty, full + "/", flat)
    if top:
        # A file that moved between repositories unchanged (a folder made a repository).
        flat.changes = {path: ends for path, ends in flat.changes.items()
                        if ends[0] is None or ends[1] is None or ends[0][:2] != ends[1][:2]}
    return flat


def large_of(flat: Flat, side: int) -> dict[str, tuple[int, int]]:
    """The large files (see :class:`Outside`) that the snapshots on ``side`` (0: ``a``, 1:
    ``b``) of ``flat`` left out, by their paths from the outer work tree."""
    found = {}
    for prefix, (holder, *ends) in flat.holders.items():
        if ends[side] is not None:
            found |= {prefix + path: info
                      for path, info in outside_of(holder, ends[side]).large.items()}
    return found


def unreadable_of(flat: Flat, side: int) -> set[str]:
    """The files that the snapshots on ``side`` (0: ``a``, 1: ``b``) of ``flat`` could not
    read (see :class:`Outside`), by their paths from the outer work tree."""
    found = set()
    for prefix, (holder, *ends) in flat.holders.items():
        if ends[side] is not None:
            found |= {prefix + path for path in outside_of(holder, ends[side]).unreadable}
    return found
