"""``glob``: find files by name pattern, respecting ``.gitignore``."""

from __future__ import annotations

from pathlib import Path

import pathspec
from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import resolve
from tools.ignore import outside_line, walk
from tools.workspace import CONTROL_CHARACTERS, pattern_from_display

MAX_RESULTS = 500
_STAND_INS = {ord(ch): 0xD800 + i for i, ch in enumerate(CONTROL_CHARACTERS)}
"""Control characters, in a pattern and in a name alike, are matched as stand-ins: pathspec
strips trailing whitespace from a pattern (a newline or tab that ends a name) and its '$'
matches before a final newline ('a.py' took the file 'a.py\\n' too). High surrogates are no
whitespace and no name holds one (an undecodable byte is a low one, U+DCNN)."""


def _name(path: Path, start: Path) -> str:
    """``path`` relative to ``start`` as the pattern is matched against it (stand-ins for
    control characters)."""
    return path.relative_to(start).as_posix().translate(_STAND_INS)


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
        # A name as the tools show it ('\\xNN' escapes) is read back into the name's own
        # characters, so a name copied from a listing matches its file.
        pattern = pattern_from_display(args.pattern.removeprefix("./")).translate(_STAND_INS)
        spec = pathspec.GitIgnoreSpec.from_lines([pattern])
        found: list[str] = []
        files = 0

        def skipped(link: Path) -> None:
            # A folder link may hold matches; a file link is named only when it would match.
            if link.is_dir() or spec.match_file(_name(link, start)):
                found.append(outside_line(link, self.ctx.workspace.relative(link)))

        for path in walk(self.ctx.workspace.root_of(start), start, outside=skipped):
            if spec.match_file(_name(path, start)):
                if files >= MAX_RESULTS:  # only claim a cap when a file is dropped
                    found.append(f"[stopped at {MAX_RESULTS} files; narrow the pattern]")
                    break
                files += 1
                found.append(self.ctx.workspace.relative(path))
        return Observation(text="\n".join(found + ([] if files else ["no files match"])))

