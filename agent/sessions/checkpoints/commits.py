"""Committing a task's files on the user's branch, and what a commit leaves out: the files the
user had already modified when the task started, and nested repositories' own files."""

from __future__ import annotations

import os
from pathlib import Path

import git

from agent.sessions.checkpoints.plumbing import (
    AGENT_EMAIL,
    AGENT_NAME,
    GITLINK_MODE,
    empty_tree,
    head_sha,
    parent_or_empty,
    run_git,
    split_z,
)
from agent.sessions.checkpoints.tree import flat_diff, has_commit, open_nested, raw_entries


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
    known = set(split_z(run_git(repo, "ls-files", "-z", "--cached", "--", *files, env=env)))
    head = head_sha(repo)
    if head:
        known |= set(split_z(run_git(repo, "ls-tree", "-r", "-z", "--name-only", head, "--", *files,
                                 env=env)))
    # A path neither on disk nor known to git (created, then removed again) is skipped:
    # `git add` would reject the whole command for it.
    paths = sorted(p for p in files if p in known or os.path.lexists(root / p))
    if not paths:
        return None
    run_git(repo, "add", "-A", "--", *paths, env=env)
    # Only paths that now differ from HEAD: a path in neither HEAD nor the index (a staged new
    # file the task deleted) would make `git commit -- <paths>` fail.
    base = head or empty_tree(repo)
    paths = split_z(run_git(repo, "diff-index", "--cached", "-z", "--name-only", "--no-renames",
                        base, "--", *paths, env=env))
    if not paths:
        return None
    env |= _identity_fallback(repo)
    run_git(repo, "commit", "-q", "-m", message, "--only", "--", *paths, env=env)
    return head_sha(repo)


def nested_changes(repo: git.Repo, before: str, after: str) -> list[str]:
    """Nested repositories (submodules, repositories cloned or made inside; paths relative to
    the root, sorted) whose files differ between the snapshots ``before`` and ``after`` while
    their HEAD stayed: what :func:`commit_task` leaves to be committed inside them."""
    linked = _split_changes(repo, before, after)[1]
    # A gitlink differs whenever a nested snapshot is taken again (a new commit), its files
    # the same or not: what counts is the files.
    changed = flat_diff(repo, before, after).changes
    return sorted(p for p in linked if any(c.startswith(p + "/") for c in changed))


def _committable(repo: git.Repo, a: str, b: str) -> set[str]:
    """The paths :func:`commit_task` may commit of those differing between ``a`` and ``b``: a
    nested repository's gitlink only where its HEAD moved (a snapshot's gitlink names the
    nested snapshot, which differs whenever its files do; they are the nested repository's to
    commit, not this one's)."""
    return _split_changes(repo, a, b)[0]


def _split_changes(repo: git.Repo, a: str, b: str) -> tuple[set[str], set[str]]:
    """The paths differing between ``a`` and ``b``: those this repository commits, and the
    nested repositories whose files alone changed."""
    root = Path(repo.working_tree_dir)
    own: set[str] = set()
    nested: set[str] = set()
    for mode_a, mode_b, sha_a, sha_b, path in raw_entries(repo, a, b):
        if mode_a == mode_b == GITLINK_MODE and \
                _link_head(root / path, sha_a) == _link_head(root / path, sha_b):
            nested.add(path)
        else:
            own.add(path)
    return own, nested


def _link_head(path: Path, sha: str) -> str | None:
    """The commit a gitlink stands for: for a snapshot of the nested repository at ``path``,
    that repository's HEAD when it was taken (None: it had no commit); else ``sha`` itself."""
    sub = open_nested(path)
    if sub is None or not has_commit(sub, sha):
        return sha
    commit = sub.commit(sha)
    if commit.author.email != AGENT_EMAIL:
        return sha
    return commit.parents[0].hexsha if commit.parents else None


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
