"""Git plumbing for checkpoints: the refs, the agent's identity, running git with its failures
in the user's words, and private index files, so that taking a snapshot never touches HEAD, the
branch, the real index or the stash. The bottom of the package: it imports none of the rest."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import git
import psutil

from agent.errors import UserError

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


def run_git(repo: git.Repo, *args: str, env: dict[str, str] | None = None,
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


def run_git_in(repo: git.Repo, *args: str, stdin: str, env: dict[str, str] | None = None) -> str:
    """:func:`run_git` with ``stdin`` as its input, names that are not UTF-8 as their bytes (they
    came from git as surrogate escapes). Through a file: git's stdin must be a real one."""
    with tempfile.TemporaryFile() as data:
        data.write(stdin.encode("utf-8", "surrogateescape"))
        data.seek(0)
        return run_git(repo, *args, env=env, istream=data)


def git_failure(repo: git.Repo, *args: str, env: dict[str, str] | None = None) -> str:
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


def split_z(output: str) -> list[str]:
    """Split ``-z`` output into its entries."""
    return [item for item in output.split("\0") if item]


def head_sha(repo: git.Repo) -> str | None:
    """HEAD's sha, or ``None`` on an unborn branch."""
    return repo.head.commit.hexsha if repo.head.is_valid() else None


def empty_tree(repo: git.Repo) -> str:
    """The empty tree's id (sha1 or sha256, whatever the repo uses)."""
    return run_git(repo, "mktree").strip()


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
    return parents[0].hexsha if parents else empty_tree(repo)


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
def temp_index(repo: git.Repo, seed: bool) -> Iterator[dict[str, str]]:
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
NO_SPLIT = ("-c", "core.splitIndex=false")
