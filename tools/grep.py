"""``grep``: regular-expression search over the workspace's non-ignored text files."""

from __future__ import annotations

import re

from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import resolve
from tools.ignore import walk
from tools.textfile import decode, looks_binary
from tools.workspace import PathRefused

MAX_MATCHES = 200
MAX_FILE_BYTES = 2 * 2**20


class GrepArgs(ToolArgs):
    pattern: str = Field(description="Python regular expression to search for.")
    path: str = Field(".", description="File or directory to search, relative to the root.")
    glob: str | None = Field(None, description="Only files whose name matches, e.g. '*.py'.")
    ignore_case: bool = Field(False, description="Case-insensitive search.")


class Grep(Tool):
    name = "grep"
    description = ("Search file contents with a regular expression; prints path:line: text. "
                   "Respects .gitignore.")
    Args = GrepArgs

    def run(self, args: GrepArgs) -> Observation:
        try:
            regex = re.compile(args.pattern, re.IGNORECASE if args.ignore_case else 0)
        except re.error as exc:
            raise ToolError(f"invalid regular expression {args.pattern!r}: {exc}") from exc
        start = resolve(self.ctx, args.path, writable=False)
        if not start.exists():
            raise ToolError(f"{args.path} does not exist")
        files = [start] if start.is_file() else walk(self.ctx.workspace.root_of(start), start)
        out: list[str] = []
        for path in files:
            if args.glob and not path.match(args.glob):
                continue
            try:
                # A symlink is read at its target, which must be inside the workspace too.
                real = self.ctx.workspace.resolve(path, writable=False)
                if real.stat().st_size > MAX_FILE_BYTES:
                    continue
                data = self.ctx.workspace.read_bytes(real)
            except (OSError, PathRefused):
                continue
            if looks_binary(data):
                continue
            rel = self.ctx.workspace.relative(path)
            # Decode and split like view does (BOM, cp1252, CRLF; only \n ends a line), so
            # "^..." matches line 1 of a BOM file and line numbers agree with view's.
            lines = decode(data).text.split("\n")
            if lines[-1] == "":
                lines.pop()
            for n, line in enumerate(lines, 1):
                if regex.search(line):
                    if len(out) >= MAX_MATCHES:  # only claim a cap when a match is dropped
                        out.append(f"[stopped at {MAX_MATCHES} matches; narrow the pattern "
                                   "or the path]")
                        return Observation(text="\n".join(out))
                    out.append(f"{rel}:{n}: {line[:300]}")
        return Observation(text="\n".join(out) or "no matches")
