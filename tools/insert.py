"""``insert``: insert text after a given line of a file."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import diff_preview, read_text, resolve, snippet, write_recorded
from tools.textfile import TextFile, encode


class InsertArgs(ToolArgs):
    path: str = Field(description="File to edit, relative to the workspace root.")
    insert_line: int = Field(description="Insert after this line (0 inserts at the top).")
    text: str = Field(description="Text to insert.")


class Insert(Tool):
    name = "insert"
    description = "Insert text after line insert_line of a file (0 = before the first line)."
    Args = InsertArgs
    mutates = True

    def run(self, args: InsertArgs) -> Observation:
        path, tf, text, added = self._insert(args, guard=True)
        write_recorded(self.ctx, path, encode(tf, text))
        first = args.insert_line + 1
        return Observation(text=f"inserted {added} line{'' if added == 1 else 's'} into "
                           f"{self.ctx.workspace.relative(path)}:\n"
                           + snippet(text, first, first + added - 1))

    def preview(self, args: InsertArgs) -> str:
        """The insertion as :meth:`run` would make it, as a diff."""
        path, tf, text, _ = self._insert(args)
        encode(tf, text)  # raises, as run would, when the encoding cannot hold it
        return diff_preview(self.ctx.workspace.relative(path), tf.text, text)

    def _insert(self, args: InsertArgs, guard: bool = False) -> tuple[Path, TextFile, str, int]:
        """The file, its text, the text after the insertion and how many lines it adds;
        ToolError when ``insert_line`` is out of range (``guard``, for a run: also when
        someone else changed the file since the model last saw it, see :mod:`tools.edits`:
        its line numbers would be from a file that is no more)."""
        path = resolve(self.ctx, args.path)
        tf = read_text(self.ctx, path, args.path, guard)
        lines = tf.text.split("\n")
        trailing = tf.text.endswith("\n")
        if trailing:
            lines.pop()
        if not 0 <= args.insert_line <= len(lines):
            raise ToolError(f"insert_line {args.insert_line} is out of range: the file has "
                            f"{len(lines)} lines (use 0..{len(lines)})")
        new = args.text[:-1] if args.text.endswith("\n") else args.text
        added = new.split("\n")
        lines[args.insert_line:args.insert_line] = added
        return path, tf, "\n".join(lines) + ("\n" if trailing or not lines else ""), len(added)
