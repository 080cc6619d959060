"""Shared steps of the file-changing tools: resolve a path, remember the old bytes, write;
refuse to write over a change someone else made since the tools last saw the file."""

from __future__ import annotations

import difflib
import hashlib
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


def read_text(ctx: ToolContext, path: Path, given: str, guard: bool = False) -> TextFile:
    """:func:`tools.textfile.read_text` through the workspace's symlink-safe reader; an error
    names the file by ``given``, the path as the model gave it, as view's errors do (an
    absolute path in a reply to a relative one read as a different file).

    ``guard`` (a partial edit about to be written, not its preview, which shows what it
    would do): also refuse a file someone else changed since the tools last saw it
    (:func:`check_seen`; a file never seen passes)."""
    read: list[bytes] = []

    def reader(full: Path) -> bytes:
        read.append(ctx.workspace.read_bytes(full))
        return read[-1]

    tf = _read_text(path, reader, display_given(given))
    if guard:
        check_seen(ctx, path, given, read[-1], unseen_ok=True)
    return tf


def write_recorded(ctx: ToolContext, path: Path, data: bytes) -> None:
    """Write ``data`` atomically, saving the previous contents for ``undo_edit``; the bytes
    written are what the tools have now seen of the file (:func:`remember`)."""
    previous = ctx.workspace.read_bytes(path) if path.is_file() else None
    ctx.workspace.atomic_write(path, data)
    ctx.edit_history.setdefault(path, []).append(previous)
    remember(ctx, path, data)


# --- what the tools last saw of a file ------------------------------------------------------
#
# A field trial lost data: the model viewed f.py, the user saved f.py while the model thought,
# then the model's create wrote its own version over it without a word, and undo (checkpoints
# around the task) could only go back to before the task: the user's change was never held
# anywhere. So the tools remember, per file, the bytes they last saw of it (a view, a partial
# one included, or their own write: ToolContext.seen) and an edit refuses to write when the
# file no longer holds them. The rules, the simplest that leave nothing made by someone else
# silently overwritten:
#
# - Seen, and changed since: every edit (create, str_replace, insert, undo_edit) is refused
#   until the model views the file again. str_replace and insert would apply to the current
#   text, but the model would edit a file it has not seen as it is (Claude Code refuses too).
# - Never seen (a new or resumed session, or a file a command of the model's changed, see
#   forget_changed): str_replace and insert are allowed, since they change the bytes as they
#   are now and keep the rest (old_str must match the current text), and a weak model often
#   edits from grep's lines without a view. create over an existing file is refused: nothing
#   tells whether what it replaces is what the model expects or a change made during the
#   task, and a view is the one step that makes the overwrite informed (it also stops a model
#   replacing a file it took for new). undo_edit needs its own write to be what is there.
# - A create that leaves the bytes as they are loses nothing and is never refused.
# - A preview (the approval prompt's diff) is not refused: it shows what the call would do.


def seen_digest(data: bytes) -> bytes:
    """The SHA-256 of ``data``, as :attr:`ToolContext.seen` keeps it."""
    return hashlib.sha256(data).digest()


def remember(ctx: ToolContext, path: Path, data: bytes) -> None:
    """Record ``data`` as what the tools last saw of the file ``path`` (viewed or written)."""
    ctx.seen[path] = seen_digest(data)


def remember_digest(ctx: ToolContext, path: Path, digest: bytes) -> None:
    """:func:`remember` by the :func:`seen_digest` of the bytes (a file read in pieces
    hashes them as it goes)."""
    ctx.seen[path] = digest


def last_seen(ctx: ToolContext, path: Path, data: bytes) -> bool:
    """True when ``data`` is what the tools last saw of the file ``path``."""
    return ctx.seen.get(path) == seen_digest(data)


def check_seen(ctx: ToolContext, path: Path, given: str, data: bytes,
               unseen_ok: bool) -> None:
    """Raise :class:`ToolError`, naming the file by ``given``, when ``data`` (the file's bytes
    now) is not what the tools last saw of it, or when they never saw it and ``unseen_ok`` is
    false (see the rules above)."""
    shown = display_given(given)
    if path not in ctx.seen:
        if not unseen_ok:
            raise ToolError(f"{shown} already exists and you have not viewed it as it is now "
                            "(not in this session, or not since a command changed it); view "
                            "it first: create replaces the whole file, and what it holds now "
                            "would be lost (to change part of it, use str_replace or insert). "
                            "Nothing was written.")
        return
    if not last_seen(ctx, path, data):
        raise ToolError(f"{shown} has changed since you last viewed or edited it (by the "
                        "user, a formatter or another program); view it again before "
                        "editing it, so that the change is not overwritten. Nothing was "
                        "written.")


def forget_changed(ctx: ToolContext) -> None:
    """Forget what the tools saw of each file that no longer holds it (called after a
    ``bash`` command). A command is the model's own (``sed -i``, a formatter it ran): a file
    it changed must not be refused as changed by someone else, so it counts as never seen
    (str_replace and insert go on; create and undo_edit ask for a view first). A file left
    as it was keeps its record, so a rewrite after a test run needs no new view. A change the
    user saved before or during the command is taken for never seen too, which still lets
    nothing overwrite it unseen."""
    for path in list(ctx.seen):
        try:
            same = path.is_file() and last_seen(ctx, path, ctx.workspace.read_bytes(path))
        except (OSError, PathRefused):
            same = False
        if not same:
            del ctx.seen[path]


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
