"""The target folder's checks, made before the model is asked anything: a folder new-project
may create or fill, whose files (and the repository around it) lose nothing."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import git

from agent.errors import UsageError
from agent.newproject.commit import PRODUCT_EXCLUDES
from tools.workspace import SCRATCH_NAME

_OTHER_DIR = {"cli_hint": " --dir", "mcp_hint": " directory"}
"""The end of "choose another": the command line's flag, the MCP tool's argument."""


def check_target(directory: Path, force: bool) -> None:
    """Refuse (:class:`UsageError`) a target that is a file, not empty without ``force``,
    the user's home or the file system's root (git init and a commit of everything in it,
    even with ``force``), or a repository with uncommitted changes."""
    if directory == Path.home().resolve() or directory.parent == directory:
        what = "the root folder" if directory.parent == directory else "your home folder"
        raise UsageError(f"{directory} is {what}; new-project makes a folder of its own: give",
                         cli_hint=" --dir a new folder inside it",
                         mcp_hint=" a new folder inside it as the directory")
    try:
        directory.exists()
    except OSError as exc:  # a name longer than the file system allows, a path it refuses
        raise UsageError(f"{directory} cannot be used: {exc.strerror or exc}; choose another",
                         **_OTHER_DIR) from exc
    if directory.exists() and not directory.is_dir():
        raise UsageError(f"{directory} exists and is not a directory; choose another",
                         **_OTHER_DIR)
    if not directory.exists():
        _check_creatable(directory)
    # A folder holding only a fresh `git init` is empty for this purpose (a field trial was
    # told such a folder "is not empty"); a repository with history is checked below.
    if directory.is_dir() and not force and any(p.name != ".git" for p in directory.iterdir()):
        raise UsageError(f"{directory} is not empty; choose another",
                         cli_hint=" --dir or pass --force", mcp_hint=" directory")
    if directory.is_dir() and force:
        hidden = _ignored_files(directory)
        if hidden:
            shown = ", ".join(hidden[:5]) + (f" and {len(hidden) - 5} more" if len(hidden) > 5
                                             else "")
            raise UsageError(f"{directory} holds files git ignores ({shown}): --force commits "
                             "the folder's files before the model writes anything, so none "
                             "is lost, and these cannot be committed; move them out of the "
                             "folder, or choose another --dir")
    outer = enclosing_repo(directory)
    if outer is not None and directory.is_dir() and _dirty_under(outer, directory):
        raise UsageError(f"{directory} has uncommitted changes in the git repository at "
                         f"{outer}; commit or stash them first, or choose another",
                         **_OTHER_DIR)
    if (directory / ".git").exists():
        # The model may rewrite any file, and the commit takes every change: work the user
        # had not committed could be lost, or end up in the new project's commit.
        try:
            dirty = git.Repo(directory).is_dirty(untracked_files=True)
        except git.GitError as exc:
            raise UsageError(f"{directory} has a .git that git cannot read ({exc}); choose "
                             "another", **_OTHER_DIR) from exc
        if dirty:
            raise UsageError(f"{directory} has uncommitted changes; commit or stash them "
                             "first, or choose another", **_OTHER_DIR)


def _check_creatable(directory: Path) -> None:
    """Raise :class:`UsageError` when ``directory`` (which does not exist) cannot be made:
    its nearest existing parent is a file or not writable. Checked before the model is asked
    anything: ``mkdir`` failing after the plan was an internal error (exit 4), with minutes of
    the model's work thrown away."""
    parent = next(p for p in directory.parents if p.exists())
    if not parent.is_dir():
        raise UsageError(f"{directory} cannot be made: {parent} is a file; choose another",
                         **_OTHER_DIR)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{directory} cannot be made: no permission to create folders in "
                         f"{parent} (or its file system is read-only); choose another",
                         **_OTHER_DIR)


REGENERABLE = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache",
                         ".tox", ".nox", "node_modules", SCRATCH_NAME})
"""Ignored folders that hold nothing a user wrote (caches, installed dependencies, the tools'
scratch folder of an earlier run)."""


def _ignored_files(directory: Path) -> list[str]:
    """What a commit of ``directory`` would leave out: the entries git ignores there (its
    ``.gitignore`` files, its repository's ``info/exclude`` when it has one, the user's global
    excludes) and :data:`PRODUCT_EXCLUDES`, folders as ``name/``, caches (:data:`REGENERABLE`,
    ``*.pyc``) and a virtualenv (``pyvenv.cfg``) left out. Git answers, so its rules are
    applied exactly; a folder without a repository is asked through a temporary one."""
    args = ["ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z",
            *(f"--exclude={pattern}" for pattern in PRODUCT_EXCLUDES)]
    try:
        if (directory / ".git").exists():
            listed = git.Git(directory).execute(["git", *args])
        else:
            with tempfile.TemporaryDirectory(prefix="dflash-agent-git-") as tmp:
                git.Git(tmp).init("-q")
                listed = git.Git(directory).execute(
                    ["git", f"--git-dir={Path(tmp) / '.git'}", f"--work-tree={directory}",
                     *args])
    except git.GitError as exc:
        raise UsageError(f"git cannot list the files of {directory} ({exc}); choose another",
                         **_OTHER_DIR) from exc
    hidden = []
    for entry in filter(None, str(listed).split("\0")):
        name = entry.rstrip("/").rsplit("/", 1)[-1]
        if name in REGENERABLE or name.endswith(".pyc") or \
                (entry.endswith("/") and (directory / entry / "pyvenv.cfg").is_file()):
            continue
        hidden.append(entry)
    return sorted(hidden)


def enclosing_repo(directory: Path) -> Path | None:
    """The top of the git work tree that holds ``directory`` (or, for a folder not made yet,
    its nearest existing parent), when that is not ``directory`` itself."""
    start = next((p for p in (directory, *directory.parents) if p.is_dir()), None)
    if start is None:
        return None
    try:
        top = Path(git.Git(start).rev_parse("--show-toplevel")).resolve()
    except git.GitError:
        return None  # not in a work tree (or git cannot tell)
    return None if top == directory else top


def _dirty_under(top: Path, directory: Path) -> bool:
    """Whether the repository at ``top`` has uncommitted changes (untracked files too) under
    ``directory``."""
    try:
        return bool(git.Git(top).status("--porcelain", "--", str(directory)).strip())
    except git.GitError:
        return True  # unreadable: the refusal's message asks to commit first, which is safe
