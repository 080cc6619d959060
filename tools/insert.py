"""``insert``: insert text after a given line of a file."""

from __future__ import annotations

from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import read_text, resolve, snippet, write_recorded
from tools.textfile import encode


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
        path = resolve(self.ctx, args.path)
        tf = read_text(self.ctx, path)
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
        text = "\n".join(lines) + ("\n" if trailing or not lines else "")
        write_recorded(self.ctx, path, encode(tf, text))
        first = args.insert_line + 1
        return Observation(text=f"inserted {len(added)} lines into "
                           f"{self.ctx.workspace.relative(path)}:\n"
                           + snippet(text, first, first + len(added) - 1))
