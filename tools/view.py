"""``view``: a file with line numbers (optionally a range), or a directory listing."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import remember, resolve
from tools.ignore import outside_line, walk
from tools.textfile import decode, looks_binary
from tools.workspace import display_given

PAGE_LINES = 400
MAX_LINE_CHARS = 2000
MAX_ENTRIES = 300


class ViewArgs(ToolArgs):
    path: str = Field(description="File or directory, relative to the workspace root.")
    view_range: list[int] | None = Field(
        None, description="[first_line, last_line], 1-based; last_line -1 means end of file.")


class View(Tool):
    name = "view"
    description = ("Show a file with line numbers (use view_range to page through long files) "
                   "or list a directory two levels deep.")
    Args = ViewArgs

    def run(self, args: ViewArgs) -> Observation:
        path = resolve(self.ctx, args.path, writable=False)
        if not path.exists():
            raise ToolError(f"{display_given(args.path)} does not exist")
        if path.is_dir():
            return Observation(text=self._listing(path))
        data = self.ctx.workspace.read_bytes(path)
        if looks_binary(data):
            raise ToolError(f"{display_given(args.path)} is a binary file ({len(data)} bytes); "
                            "not shown")
        decoded = decode(data)
        lines = decoded.text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        total = len(lines)
        if args.view_range is not None:
            if len(args.view_range) != 2:
                raise ToolError("view_range must be [first_line, last_line]")
            first, last = args.view_range
            last = total if last == -1 else last
            if not 1 <= first <= max(total, 1) or last < first:
                raise ToolError(f"invalid view_range {args.view_range}: the file has "
                                f"{total} lines")
            last = min(last, total)
        else:
            first, last = 1, min(total, PAGE_LINES)
        body = "\n".join(f"{n:6}\t{_clip(lines[n - 1])}" for n in range(first, last + 1))
        if args.view_range is None and total > PAGE_LINES:
            body += (f"\n[showing lines 1-{PAGE_LINES} of {total}; use view_range to see "
                     "more]")
        if decoded.encoding != "utf-8":
            body = (f"[not valid UTF-8: decoded as {decoded.encoding}, a guess; edits may only "
                    "add ASCII or characters already in the file]\n" + body)
        # Any view of the file, a range or the first page too, is what the model has seen of
        # it: an edit is refused if someone else changes it from now on (tools.edits).
        remember(self.ctx, path, data)
        return Observation(text=body or "(empty file)")

    def _listing(self, path) -> str:
        entries: list[str] = []
        relative = self.ctx.workspace.relative

        def skipped(link: Path) -> None:
            entries.append(outside_line(link, relative(link)))

        for item in walk(self.ctx.workspace.root_of(path), path, include_dirs=True, max_depth=2,
                         outside=skipped):
            rel = relative(item)
            entries.append(rel + ("/" if item.is_dir() else ""))
            if len(entries) >= MAX_ENTRIES:
                entries.append(f"[listing capped at {MAX_ENTRIES} entries]")
                break
        return "\n".join(entries) or "(empty directory)"


def _clip(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    return line[:MAX_LINE_CHARS] + f" [line clipped: {len(line)} chars]"
