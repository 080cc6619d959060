"""Shared steps of the file-changing tools: resolve a path, remember the old bytes, write."""

from __future__ import annotations

from pathlib import Path

from tools.base import ToolContext, ToolError
from tools.textfile import atomic_write
from tools.workspace import OutsideWorkspace


def resolve(ctx: ToolContext, path: str, writable: bool = True) -> Path:
    """Workspace-confined absolute path (``writable=False``: read-only roots allowed too);
    raises :class:`ToolError` when outside."""
    try:
        return ctx.workspace.resolve(path, writable)
    except OutsideWorkspace as exc:
        raise ToolError(str(exc)) from exc


def write_recorded(ctx: ToolContext, path: Path, data: bytes) -> None:
    """Write ``data`` atomically, saving the previous contents for ``undo_edit``."""
    previous = path.read_bytes() if path.is_file() else None
    atomic_write(path, data)
    ctx.edit_history.setdefault(path, []).append(previous)


def snippet(text: str, first_line: int, last_line: int, context: int = 3) -> str:
    """Lines ``first_line..last_line`` (1-based) of ``text`` with ``context`` lines around,
    numbered like the view tool."""
    lines = text.split("\n")
    start = max(1, first_line - context)
    end = min(len(lines), last_line + context)
    return "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(start, end + 1))
