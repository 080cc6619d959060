"""Shared steps of the file-changing tools: resolve a path, remember the old bytes, write."""

from __future__ import annotations

from pathlib import Path

from tools.base import ToolContext, ToolError
from tools.textfile import TextFile
from tools.textfile import read_text as _read_text
from tools.workspace import PathRefused


def resolve(ctx: ToolContext, path: str, writable: bool = True) -> Path:
    """Workspace-confined absolute path (``writable=False``: read-only roots allowed too);
    raises :class:`ToolError` when outside, or (writing) inside a version-control folder."""
    try:
        return ctx.workspace.resolve(path, writable)
    except PathRefused as exc:
        raise ToolError(str(exc)) from exc


def read_text(ctx: ToolContext, path: Path) -> TextFile:
    """:func:`tools.textfile.read_text` through the workspace's symlink-safe reader."""
    return _read_text(path, ctx.workspace.read_bytes)


def write_recorded(ctx: ToolContext, path: Path, data: bytes) -> None:
    """Write ``data`` atomically, saving the previous contents for ``undo_edit``."""
    previous = ctx.workspace.read_bytes(path) if path.is_file() else None
    ctx.workspace.atomic_write(path, data)
    ctx.edit_history.setdefault(path, []).append(previous)


def snippet(text: str, first_line: int, last_line: int, context: int = 3) -> str:
    """Lines ``first_line..last_line`` (1-based) of ``text`` with ``context`` lines around,
    numbered like the view tool."""
    lines = text.split("\n")
    start = max(1, first_line - context)
    end = min(len(lines), last_line + context)
    return "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(start, end + 1))
