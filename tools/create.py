"""``create``: write a new file (or replace one), creating parent directories."""

from __future__ import annotations

from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import read_text, resolve, write_recorded
from tools.textfile import TextFile, encode


def lines_label(text: str) -> str:
    """How many lines ``text`` holds as ``view`` numbers them, in words ("1 line", "2 lines"):
    a final newline ends the last line rather than starting another."""
    n = text.count("\n") + (bool(text) and not text.endswith("\n"))
    return f"{n} line" if n == 1 else f"{n} lines"


class CreateArgs(ToolArgs):
    path: str = Field(description="File to write, relative to the workspace root.")
    file_text: str = Field(description="The complete contents of the file.")


class Create(Tool):
    name = "create"
    description = "Create a file with the given contents (replaces the file if it exists)."
    Args = CreateArgs
    mutates = True

    def run(self, args: CreateArgs) -> Observation:
        path = resolve(self.ctx, args.path)
        if path.is_dir():
            raise ToolError(f"{args.path} is a directory")
        existed = path.is_file()
        # An existing file keeps its encoding and line endings.
        fmt = read_text(self.ctx, path) if existed else TextFile("", "utf-8", "\n", False)
        data = encode(fmt, args.file_text)
        # Compared as bytes, as written: "replaced" for a file left as it was misled the user
        # and the model alike (a weak model rewrites a file it has just written).
        same = existed and self.ctx.workspace.read_bytes(path) == data
        write_recorded(self.ctx, path, data)
        rel, label = self.ctx.workspace.relative(path), lines_label(args.file_text)
        if same:
            return Observation(text=f"unchanged {rel} ({label}, the same content)")
        return Observation(text=f"{'replaced' if existed else 'created'} {rel} ({label})")
