"""``glob``: find files by name pattern, respecting ``.gitignore``."""

from __future__ import annotations

import re
from pathlib import Path

import pathspec
from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import resolve
from tools.ignore import outside_line, walk

MAX_RESULTS = 500
_SHOWN_ESCAPE = re.compile(r"\\(\\|x[89a-fA-F][0-9a-fA-F])")


def _shown_bytes_read(pattern: str) -> str:
    """``pattern`` with each ``\\xNN`` that names a byte the way the tools show a name that is
    not UTF-8 (:func:`tools.workspace.display_name`) turned back into that byte, so a name
    copied from a listing matches its file. ``\\\\`` stays: in a glob it already is one
    literal backslash, as in a shown name."""
    def read(m: re.Match[str]) -> str:
        # U+DCNN is how Python holds the undecodable byte 0xNN of a file name.
        return m[0] if m[1] == "\\" else chr(0xDC00 + int(m[1][1:], 16))
    return _SHOWN_ESCAPE.sub(read, pattern)


class GlobArgs(ToolArgs):
    pattern: str = Field(description="Glob such as '**/*.py' or 'src/*.toml'.")
    path: str = Field(".", description="Directory to search from, relative to the root.")


class Glob(Tool):
    name = "glob"
    description = "List files matching a glob pattern (e.g. '**/*.py'). Respects .gitignore."
    Args = GlobArgs

    def run(self, args: GlobArgs) -> Observation:
        start = resolve(self.ctx, args.path, writable=False)
        if not start.is_dir():
            raise ToolError(f"{args.path} is not a directory")
        # Git wildmatch semantics: '**' spans folders; a pattern without '/' matches at any depth.
        spec = pathspec.GitIgnoreSpec.from_lines(
            [_shown_bytes_read(args.pattern.removeprefix("./"))])
        found: list[str] = []
        files = 0

        def skipped(link: Path) -> None:
            # A folder link may hold matches; a file link is named only when it would match.
            if link.is_dir() or spec.match_file(link.relative_to(start).as_posix()):
                found.append(outside_line(link, self.ctx.workspace.relative(link)))

        for path in walk(self.ctx.workspace.root_of(start), start, outside=skipped):
            if spec.match_file(path.relative_to(start).as_posix()):
                if files >= MAX_RESULTS:  # only claim a cap when a file is dropped
                    found.append(f"[stopped at {MAX_RESULTS} files; narrow the pattern]")
                    break
                files += 1
                found.append(self.ctx.workspace.relative(path))
        return Observation(text="\n".join(found + ([] if files else ["no files match"])))

