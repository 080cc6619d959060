"""What git keeps beside the files: the staged state and the stash entries, recorded around a
task and put back by an undo.

A snapshot of files cannot hold what git keeps beside them, and a model with a shell can run git
(a field trial: `git reset -q && git stash drop -q`; undo brought the files back, but the
user's stash entry was gone for good and a staged file was unstaged, and nothing said so). So
:func:`record_git_state` keeps the staged state and the stash entries on a ref of their own,
and :func:`restore_git_state` puts back what the task dropped.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass

import git

from agent.sessions.checkpoints.plumbing import (
    AGENT_IDENTITY,
    NO_SPLIT,
    RepoStateError,
    empty_tree,
    git_failure,
    run_git,
    split_z,
    temp_index,
)
from agent.sessions.checkpoints.restores import RestorePlan
from agent.sessions.checkpoints.tree import changed_paths


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
    sha = run_git(repo, "commit-tree", "--no-gpg-sign", *parents, "-m", message, "-m", record,
               index or empty_tree(repo), env=AGENT_IDENTITY).strip()
    run_git(repo, "update-ref", "-m", message, ref, sha)
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


@dataclass
class _GitState:
    """What :func:`record_git_state` kept: the index as a tree (``None``: it had unmerged
    entries) and the stash entries as ``[sha, message]``, top first."""

    index: str | None
    stash: list[list[str]]


def _index_tree(repo: git.Repo) -> str:
    """Tree id of the real index, written from a copy of it."""
    with temp_index(repo, seed=True) as env:
        return run_git(repo, *NO_SPLIT, "write-tree", env=env).strip()


def _stash_entries(repo: git.Repo) -> list[list[str]]:
    """``[sha, message]`` of every stash entry, ``stash@{0}`` first."""
    return [entry.split(" ", 1)
            for entry in split_z(run_git(repo, "stash", "list", "-z", "--format=%H %gs"))]


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
        failed = git_failure(repo, *command[1:])
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
        failed = git_failure(repo, *command[1:], *put_back)
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
