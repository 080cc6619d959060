"""Walking a workspace the way git sees it: ``.gitignore`` files (root and nested) honoured,
and the repository's ``.git/info/exclude`` and the user's global excludes file below them."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path

import pathspec

from tools.workspace import read_regular

ALWAYS_SKIPPED = {".git", ".dflash-agent", ".hg", ".svn", ".jj"}


MAX_GITIGNORE_BYTES = 1 << 20
"""A ``.gitignore`` is read up to this size (real ones are a few KB)."""


def _spec_for(folder: Path) -> pathspec.GitIgnoreSpec | None:
    ignore = folder / ".gitignore"
    if not ignore.is_file():
        return None
    data = read_regular(ignore, MAX_GITIGNORE_BYTES)
    return None if data is None else _spec_of(data)


def _spec_of(data: bytes) -> pathspec.GitIgnoreSpec:
    """The patterns of an ignore file, those git can use: a line pathspec rejects ('[z-a]',
    '!', a lone backslash) is skipped, as git skips it (it raised out of every walk, and a
    bad line in the global excludes file broke the search tools in every repository)."""
    lines = []
    for line in data.decode("utf-8", "replace").splitlines():
        try:
            pathspec.GitIgnoreSpec.from_lines([line])
        except (ValueError, re.error):
            continue
        lines.append(line)
    return pathspec.GitIgnoreSpec.from_lines(lines)


def _exclude_specs(root: Path) -> list[tuple[Path, pathspec.GitIgnoreSpec]]:
    """The specs of the excludes files that apply at ``root`` below every ``.gitignore``, in
    git's order (the global one, then the repository's ``info/exclude``), each based at
    ``root``. A file excluded only there (a user's local notes, an editor's files) was listed
    and searched by the tools though git and ripgrep leave it out. None outside a git
    repository (git applies neither there)."""
    specs: list[tuple[Path, pathspec.GitIgnoreSpec]] = []
    if not os.path.lexists(root / ".git"):
        return specs
    for path in (_global_excludes(str(root)), _git_dir(root) / "info" / "exclude"):
        data = read_regular(path, MAX_GITIGNORE_BYTES) if path else None
        if data:
            specs.append((root, _spec_of(data)))
    return specs


def _git_dir(root: Path) -> Path:
    """``root``'s git folder for ``info/exclude``: ``.git``, or where a ``.git`` file (a
    submodule's, a linked worktree's) points, and for a linked worktree the main one's
    (``commondir``), where git reads it."""
    found = root / ".git"
    data = read_regular(found, 4096)
    if data is not None and data.startswith(b"gitdir:"):
        found = root / data[7:].strip().decode("utf-8", "surrogateescape")
    common = read_regular(found / "commondir", 4096)
    if common:
        found = found / common.strip().decode("utf-8", "surrogateescape")
    return found


@lru_cache(maxsize=64)
def _global_excludes(root: str) -> Path | None:
    """The user's global excludes file as git finds it from ``root``: ``core.excludesFile``,
    else ``$XDG_CONFIG_HOME/git/ignore`` (``~/.config/git/ignore``). Asked once per root and
    process: a git command per walk would cost more than the walk."""
    try:
        found = subprocess.run(["git", "config", "--path", "--get", "core.excludesFile"],
                               cwd=root, capture_output=True, text=True, timeout=10,
                               stdin=subprocess.DEVNULL).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        found = ""
    if found:
        return Path(root, found)  # a relative value is taken from where git runs
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"),
                                                                ".config")
    return Path(config, "git", "ignore")


def outside_line(path: Path, rel: str) -> str:
    """How a listing names the symlink ``path`` (shown as ``rel``) that leads outside the
    workspace and was skipped, so the model knows something is there it cannot see."""
    try:
        path.resolve()
    except (OSError, RuntimeError):  # a loop leads nowhere, not outside
        return f"{rel} -> a symlink loop, skipped"
    return f"{rel}{'/' if path.is_dir() else ''} -> outside the workspace, skipped"


def walk(root: Path, start: Path, include_dirs: bool = False,
         max_depth: int | None = None,
         outside: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Paths under ``start`` (inside ``root``) that git would not ignore, sorted per folder.

    ``.gitignore`` files between ``root`` and each folder apply, like git. Symlinked folders
    are not followed, and symlinks whose target is outside ``root`` are left out; ``outside``
    is called with each such link that is not ignored, at its place in the walk.
    ``max_depth`` counts levels below ``start`` (1 = direct children).
    """
    root, start = root.resolve(), start.resolve()
    specs = _exclude_specs(root)
    folder = root
    for part in [root, *reversed(start.relative_to(root).parents)] if start != root else [root]:
        folder = part if part == root else root / part
        spec = _spec_for(folder)
        if spec:
            specs.append((folder, spec))
    yield from _walk(root, start, specs, include_dirs, max_depth, 1, outside)


def _ignored(path: Path, is_dir: bool, specs: list[tuple[Path, pathspec.GitIgnoreSpec]]) -> bool:
    # Like git, the deepest .gitignore with a matching pattern decides, so a nested "!name"
    # re-includes what a parent folder's file ignores.
    for base, spec in reversed(specs):
        rel = path.relative_to(base).as_posix() + ("/" if is_dir else "")
        result = spec.check_file(rel)
        if result.include is not None:
            return result.include
    return False


def ignored(root: Path, path: Path) -> bool:
    """Whether ``walk`` from ``root`` leaves out ``path`` (inside ``root``, symlinks not
    resolved) because a ``.gitignore`` ignores it or one of its folders: a file in an ignored
    folder stays ignored, as in git, whatever a deeper ``!pattern`` says."""
    root = root.resolve()
    specs = _exclude_specs(root)
    folder = root
    parts = path.relative_to(root).parts
    for depth, part in enumerate(parts):
        spec = _spec_for(folder)
        if spec:
            specs.append((folder, spec))
        folder = folder / part
        last = depth == len(parts) - 1
        if _ignored(folder, not last or (folder.is_dir() and not folder.is_symlink()), specs):
            return True
    return False


def _inside(path: Path, root: Path) -> bool:
    try:
        target = path.resolve()
    except (OSError, RuntimeError):  # a symlink loop
        return False
    return target == root or root in target.parents


def _walk(root: Path, folder: Path, specs: list[tuple[Path, pathspec.GitIgnoreSpec]],
          include_dirs: bool, max_depth: int | None, depth: int,
          outside: Callable[[Path], None] | None) -> Iterator[Path]:
    local = _spec_for(folder)
    if local and all(base != folder for base, _ in specs):
        specs = [*specs, (folder, local)]
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        if entry.name in ALWAYS_SKIPPED:
            continue
        path = Path(entry.path)
        is_dir = entry.is_dir(follow_symlinks=False)
        if _ignored(path, is_dir, specs):
            continue
        if entry.is_symlink() and not _inside(path, root):
            # Neither listed nor read: its contents belong to another folder. Only named, so
            # that a search over a folder does not look complete when it is not.
            if outside is not None:
                outside(path)
            continue
        if is_dir:
            if include_dirs:
                yield path
            if max_depth is None or depth < max_depth:
                yield from _walk(root, path, specs, include_dirs, max_depth, depth + 1,
                                 outside)
        else:
            yield path
