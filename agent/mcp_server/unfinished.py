"""A new project whose waiting call went away: what the call found at its directory
(:class:`NewFolder`), and removing what the stopped task made there
(:func:`discard_unfinished`), never what was there before."""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import git


@dataclass(frozen=True)
class NewFolder:
    """What a ``new_project`` call found at its directory, so that what its task makes can be
    told apart from what was there before."""

    top: Path
    """The project's folder, or its highest parent that did not exist when the call came."""
    existed: bool
    """``top`` (then the project's folder) existed, empty: only what is in it is the task's."""

    @classmethod
    def at(cls, directory: Path) -> NewFolder:
        """What the call finds at ``directory`` (resolved; missing, or an empty folder)."""
        if directory.exists():
            return cls(directory, True)
        top = directory
        while not top.parent.exists():
            top = top.parent
        return cls(top, False)


def present(path: Path) -> bool:
    """Whether something (a link too, a broken one included) is at ``path``; False when it
    cannot be told."""
    try:
        return path.exists() or path.is_symlink()
    except OSError:
        return False


def _has_commits(folder: Path) -> bool | None:
    """Whether the repository of ``folder`` itself (not an enclosing one) has a commit; None
    when git cannot tell."""
    try:
        return git.Repo(folder).head.is_valid()
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return False
    except (git.GitError, ValueError, OSError):
        return None


def _remove_tree(folder: Path, problems: list[str]) -> None:
    """``shutil.rmtree`` that goes on past what it cannot remove, noting each in ``problems``
    (``onerror`` is deprecated from Python 3.12, ``onexc`` missing before it)."""
    def failed(_func: Any, path: str, exc: BaseException) -> None:
        problems.append(f"{path}: {exc}")

    if sys.version_info >= (3, 12):
        shutil.rmtree(folder, onexc=failed)
    else:
        shutil.rmtree(folder, onerror=lambda func, path, info: failed(func, path, info[1]))


def discard_unfinished(fresh: NewFolder | None, project: Path, state: str,
                       result: dict[str, Any] | None, started: bool) -> str:
    """Remove what a new project in ``project``, stopped because its call went away, made: the
    folder its call found missing (:attr:`NewFolder.top` of ``fresh``), or, when the project's
    folder existed empty, everything in it. ``state`` and ``result``: how its job ended and its
    worker's last line; ``started``: whether its worker was started. Returns what was done, in
    words, or ``""`` when there is nothing to say (the task finished first, or it is not a new
    project).

    What existed before the call is never touched. Only a task that said it was interrupted
    while making the project (its worker's ``done`` line, ``created``) counts as its maker: one
    that never started, or failed (as when the folder was no longer empty when it began), or
    had to be killed, leaves the folder as it is. A project with a commit is kept (finished,
    or saved work); so is one whose folder became a link, or that git cannot read. The server
    refuses any other task in or around a running task's folder, so what is in it was written
    during the call, by the task."""
    if fresh is None or state != "cancelled" or (result or {}).get("commit"):
        return ""
    stopped = "the host stopped waiting before the project was finished, so the task was stopped"
    if not started:
        return f"{stopped} before it began: nothing was written"
    if not present(project) or (result is not None and not result.get("created")):
        return f"{stopped}; nothing had been written in {project}"
    kept = f"{stopped}; the unfinished project stays in {project}, nothing committed"
    if result is None:
        return f"{kept} (the task did not say what it had made: not removed)"
    if fresh.top.is_symlink() or project.is_symlink():
        return f"{kept} (the folder is now a link: not removed)"
    commits = _has_commits(project)
    if commits is None:
        return f"{kept} (git cannot read its repository: not removed)"
    if commits:
        return f"{kept} (its repository has a commit: not removed)"
    problems: list[str] = []
    if fresh.existed:
        for child in list(project.iterdir()):
            if child.is_dir() and not child.is_symlink():
                _remove_tree(child, problems)
            else:
                try:
                    child.unlink()
                except OSError as exc:
                    problems.append(f"{child}: {exc}")
        what = f"everything the task had written in {project} was removed (the folder was " \
               "empty before the call, and is again)"
    else:
        _remove_tree(fresh.top, problems)
        what = f"{fresh.top}, which the call had made, was removed"
    if problems:
        return (f"{stopped}; the unfinished project in {project} could not all be removed "
                f"({len(problems)} problem(s), first: {problems[0]}); the rest stays")
    return f"{stopped}: {what}"
