"""Shared steps of the file-changing tools: resolve a path, remember the old bytes, write."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from tools.base import ToolContext, ToolError
from tools.textfile import TextFile
from tools.textfile import read_text as _read_text
from tools.workspace import PathRefused, display_given


def resolve(ctx: ToolContext, path: str, writable: bool = True) -> Path:
    """Workspace-confined absolute path (``writable=False``: read-only roots allowed too);
    raises :class:`ToolError` when outside, or (writing) inside a version-control folder."""
    try:
        return ctx.workspace.resolve(path, writable)
    except PathRefused as exc:
        raise ToolError(str(exc)) from exc


def read_text(ctx: ToolContext, path: Path, given: str) -> TextFile:
    """:func:`tools.textfile.read_text` through the workspace's symlink-safe reader; an error
    names the file by ``given``, the path as the model gave it, as view's errors do (an
    absolute path in a reply to a relative one read as a different file)."""
    return _read_text(path, ctx.workspace.read_bytes, display_given(given))


def write_recorded(ctx: ToolContext, path: Path, data: bytes) -> None:
    """Write ``data`` atomically, saving the previous contents for ``undo_edit``."""
    previous = ctx.workspace.read_bytes(path) if path.is_file() else None
    ctx.workspace.atomic_write(path, data)
    ctx.edit_history.setdefault(path, []).append(previous)


def snippet(text: str, first_line: int, last_line: int, context: int = 3) -> str:
    """Lines ``first_line..last_line`` (1-based) of ``text`` with ``context`` lines around,
    numbered like the view tool: the final line break ends the last line, so a file ending
    in one shows no empty line after it; "(empty file)" when no line is left."""
    # Split as view splits: text.split("\n") numbered a line after the final break, an empty
    # "N\t" that view never shows.
    lines = _lines(text)
    if not lines:
        return "(empty file)"
    start = max(1, first_line - context)
    end = min(len(lines), last_line + context)
    return "\n".join(f"{n:6}\t{lines[n - 1]}" for n in range(start, end + 1))


_HUNK = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@")


def _lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final line break ends the last line; it is not an empty line
    return lines


def diff_preview(rel: str, before: str, after: str, context: int = 3) -> str:
    """A unified diff of a file's text ``before`` and ``after`` an edit, its hunks numbered
    like the file. Only the changed region (plus ``context`` lines) goes through difflib, so
    an edit of a huge file costs what an edit of a small one does."""
    a, b = _lines(before), _lines(after)
    same = min(len(a), len(b))
    start = 0
    while start < same and a[start] == b[start]:
        start += 1
    end = 0
    while end < same - start and a[-1 - end] == b[-1 - end]:
        end += 1
    lo = max(0, start - context)
    keep = max(0, end - context)
    diff = difflib.unified_diff(a[lo:len(a) - keep], b[lo:len(b) - keep], f"a/{rel}",
                                f"b/{rel}", n=context, lineterm="")

    def shift(line: str) -> str:
        # difflib numbers the window, which starts at file line lo + 1: adding lo gives the
        # file's numbers (also for an empty side, numbered by the line it follows).
        m = _HUNK.match(line)
        if m is None:
            return line
        return f"@@ -{int(m[1]) + lo}{m[2] or ''} +{int(m[3]) + lo}{m[4] or ''} @@"
    return "\n".join(shift(line) for line in diff)
