"""The workspace root that confines every tool, and its hidden scratch directory."""

from __future__ import annotations

from pathlib import Path

SCRATCH_NAME = ".dflash-agent"


class OutsideWorkspace(ValueError):
    """A path resolves (symlinks included) outside the workspace root."""


class Workspace:
    """A directory the tools may read and write; paths resolve relative to it.

    ``read_only_roots`` are further folders (an activated skill's) that reading tools may use
    but nothing may write to. ``scratch`` (``<root>/.dflash-agent``) holds files the tools
    create for the model (spilled command output, background job logs); it is hidden from git
    via ``.git/info/exclude``.
    """

    def __init__(self, root: Path):
        self.root = Path(root).expanduser().resolve()
        self.read_only_roots: list[Path] = []

    def add_read_only_root(self, folder: Path) -> None:
        """Let reading tools use ``folder`` (symlinks resolved) from now on."""
        full = Path(folder).expanduser().resolve()
        if full not in self.read_only_roots:
            self.read_only_roots.append(full)

    def root_of(self, full: Path) -> Path:
        """The root (workspace or read-only) containing the resolved path ``full``."""
        for root in (self.root, *self.read_only_roots):
            if full == root or root in full.parents:
                return root
        raise OutsideWorkspace(f"{full} is outside the workspace {self.root}")

    def resolve(self, path: str | Path, writable: bool = True) -> Path:
        """Absolute, symlink-resolved path inside the workspace, or (``writable=False``, for
        tools that only read) inside a read-only root too; raises :class:`OutsideWorkspace`
        otherwise."""
        raw = Path(str(path)).expanduser()
        full = (raw if raw.is_absolute() else self.root / raw).resolve()
        if full == self.root or self.root in full.parents:
            return full
        for root in self.read_only_roots:
            if full == root or root in full.parents:
                if writable:
                    raise OutsideWorkspace(f"{path} is in the read-only folder {root} (an "
                                           "activated skill's); write inside the workspace "
                                           f"{self.root} instead")
                return full
        raise OutsideWorkspace(f"{path} is outside the workspace {self.root}; "
                               "only paths inside it can be used")

    def relative(self, path: Path) -> str:
        """``path`` relative to the root, for display."""
        try:
            return str(path.relative_to(self.root)) or "."
        except ValueError:
            return str(path)

    @property
    def scratch(self) -> Path:
        """The scratch directory, created and git-excluded on first use."""
        folder = self.root / SCRATCH_NAME
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            hide_from_git(self.root, f"/{SCRATCH_NAME}/")
        return folder


def hide_from_git(root: Path, pattern: str) -> None:
    """Add ``pattern`` to ``<root>/.git/info/exclude`` when ``root`` is a git work tree."""
    git_dir = root / ".git"
    if not git_dir.is_dir():
        return
    exclude = git_dir / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    existing = exclude.read_text("utf-8") if exclude.is_file() else ""
    if pattern not in existing.splitlines():
        with exclude.open("a", encoding="utf-8") as fh:
            fh.write(("" if existing.endswith("\n") or not existing else "\n") + pattern + "\n")
