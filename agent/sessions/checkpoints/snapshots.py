"""Taking a snapshot: the whole working tree committed through a temporary index file, each
nested repository in a snapshot of its own, what an earlier snapshot left out kept out (see
:mod:`agent.sessions.checkpoints.coverage`)."""

from __future__ import annotations

import os
from pathlib import Path

import git

from agent.sessions.checkpoints.coverage import (
    Outside,
    large_files,
    outside_of,
    unreadable_files,
    untracked_and_ignored,
)
from agent.sessions.checkpoints.plumbing import (
    AGENT_IDENTITY,
    GITLINK_MODE,
    NO_SPLIT,
    RepoStateError,
    head_sha,
    run_git,
    run_git_in,
    split_z,
    sweep_temp_indexes,
    temp_index,
)
from agent.sessions.checkpoints.tree import has_commit, open_nested


def snapshot(repo: git.Repo, ref: str, message: str, since: str | None = None,
             max_file: int | None = None) -> str:
    """Commit the whole working tree and point ``ref`` at it; returns the commit's sha.

    ``since``: an earlier snapshot of the same work (the task's start, for its end): paths it
    left out stay out and paths it holds stay in, whatever the ignore rules say now (see
    :mod:`agent.sessions.checkpoints.coverage`). ``max_file``: untracked files larger than
    this many bytes are left out, by size and time (default: ``since``'s limit; none without
    it). The parent is HEAD when there is one (an unborn branch gives a root commit). Files
    that cannot be read are left out (:attr:`Outside.unreadable`). Raises
    :class:`RepoStateError` when git cannot read the tree (a broken index).
    """
    return commit_snapshot(repo, message, since, ref, max_file)


def commit_snapshot(repo: git.Repo, message: str, since: str | None, ref: str | None,
                     max_file: int | None = None) -> str:
    """:func:`snapshot`, with ``ref`` optional: a snapshot only compared with (a diff's view of
    now) needs no ref, but a nested repository's part of it still needs a commit."""
    tree, outside = write_tree(repo, since, ref, message, max_file)
    head = head_sha(repo)
    parents = ["-p", head] if head else []
    # On stdin: the record of ignored files can outgrow what one argument may hold (128 KiB
    # on Linux), and the commit would fail with E2BIG.
    sha = run_git_in(repo, "commit-tree", "--no-gpg-sign", *parents, tree, env=AGENT_IDENTITY,
                  stdin=f"{message}\n\n{outside.message()}\n").strip()
    if ref:
        run_git(repo, "update-ref", "-m", message, ref, sha)
    return sha


def write_tree(repo: git.Repo, since: str | None = None, ref: str | None = None,
                message: str = "dflash-agent: the working tree now",
                max_file: int | None = None) -> tuple[str, Outside]:
    """Tree id of the whole working tree as `git add -A` sees it, via a temporary index, and
    what it left out; ``since`` and ``max_file``: see :func:`snapshot`. Each nested repository
    is snapshotted in itself (with ``message``, on ``ref`` when given) and linked by its
    gitlink."""
    prior = outside_of(repo, since) if since else Outside()
    limit = max_file if max_file is not None else prior.limit
    kept = _tree_entries(repo, since) if since else {}
    untracked, nested_dirs, ignored = untracked_and_ignored(repo)
    root = Path(repo.working_tree_dir)
    with temp_index(repo, seed=True) as env:
        index = _index_entries(repo, env)
        # What the earlier snapshot holds stays covered: a path the task's new ignore rule
        # hides is still compared (tracked in the temporary index, `add -A` updates it).
        missing = [(path, entry) for path, entry in kept.items() if path not in index]
        if missing:
            info = "".join(f"{mode} {sha}\t{path}\0" for path, (mode, sha) in missing)
            run_git_in(repo, *NO_SPLIT, "update-index", "--add", "--replace", "-z",
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
        large = {} if limit is None else large_files(
            root, ({*untracked, *kept} - set(index)) - excluded - set(nested), limit)
        excluded |= set(large)
        # Unreadable, now or when an earlier snapshot of the task was taken: `add` would fail.
        unreadable = {path for path in prior.unreadable
                      if path not in kept and os.path.lexists(root / path)}
        unreadable |= unreadable_files(root, untracked - set(kept) - excluded - set(nested))
        excluded |= unreadable
        dropped = [path for path in excluded if path in index or path in kept]
        if dropped:
            run_git_in(repo, *NO_SPLIT, "update-index", "--force-remove", "-z", "--stdin",
                    env=env, stdin="".join(f"{path}\0" for path in dropped))
        specs = ["."] + [f":(exclude,literal){path}" for path in [*sorted(excluded), *nested]]
        try:
            _add_all(repo, env, specs)
        except RepoStateError:
            # A file git tracks or the earlier snapshot holds that can no longer be read: it
            # is left out too (its old content would be a lie), found only when `add` fails,
            # as checking every file on every snapshot would cost a read of each.
            stuck = unreadable_files(root, {*index, *kept, *untracked} - excluded - set(nested))
            if not stuck:
                raise
            unreadable |= stuck
            run_git_in(repo, *NO_SPLIT, "update-index", "--force-remove", "-z", "--stdin",
                    env=env, stdin="".join(f"{path}\0" for path in stuck))
            _add_all(repo, env, specs + [f":(exclude,literal){path}" for path in stuck])
        links = []
        for path in nested:
            sub = open_nested(root / path)
            if sub is None:
                continue
            sweep_temp_indexes(Path(sub.git_dir))
            mode, sha = kept.get(path, ("", ""))
            sub_since = sha if mode == GITLINK_MODE and has_commit(sub, sha) else None
            sub_sha = commit_snapshot(sub, message, sub_since, ref, limit)
            links.append(f"{GITLINK_MODE} {sub_sha}\t{path}\0")
        if links:
            run_git_in(repo, *NO_SPLIT, "update-index", "--add", "--replace", "-z",
                    "--index-info", env=env, stdin="".join(links))
        tree = run_git(repo, "write-tree", env=env).strip()
    # Recorded for the next snapshot: what is ignored now, and what was left out before and
    # is still there (a file the task un-ignored stays out for the rest of the task).
    outside = Outside({entry for entry in ignored if entry not in kept}
                      | {entry for entry in prior.ignored
                         if os.path.lexists(root / entry.rstrip("/"))}, large, limit,
                      unreadable)
    return tree, outside


def _add_all(repo: git.Repo, env: dict[str, str], specs: list[str]) -> None:
    """`git add -A` of the pathspecs ``specs`` into the index ``env`` names."""
    run_git_in(repo, *NO_SPLIT, "-c", "advice.addEmbeddedRepo=false", "add", "-A",
            "--pathspec-from-file=-", "--pathspec-file-nul", env=env,
            stdin="".join(f"{spec}\0" for spec in specs))


def _tree_entries(repo: git.Repo, commit: str) -> dict[str, tuple[str, str]]:
    """``{path: (mode, sha)}`` of every file, link and gitlink in ``commit``'s tree."""
    found = {}
    for item in split_z(run_git(repo, "ls-tree", "-r", "-z", "--full-tree", commit)):
        meta, path = item.split("\t", 1)
        mode, _, sha = meta.split(" ")
        found[path] = (mode, sha)
    return found


def _index_entries(repo: git.Repo, env: dict[str, str]) -> dict[str, str]:
    """``{path: mode}`` of the index ``env`` points git at."""
    found = {}
    for item in split_z(run_git(repo, "ls-files", "-s", "-z", env=env)):
        meta, path = item.split("\t", 1)
        found[path] = meta.split(" ")[0]
    return found
