"""``glob``: find files by name pattern, respecting ``.gitignore``."""

from __future__ import annotations

import pathspec
from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import resolve
from tools.ignore import walk

MAX_RESULTS = 500


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
        spec = pathspec.GitIgnoreSpec.from_lines([args.pattern.removeprefix("./")])
        found = []
        for path in walk(self.ctx.workspace.root_of(start), start):
            if spec.match_file(path.relative_to(start).as_posix()):
                if len(found) >= MAX_RESULTS:  # only claim a cap when a file is dropped
                    found.append(f"[stopped at {MAX_RESULTS} files; narrow the pattern]")
                    break
                found.append(self.ctx.workspace.relative(path))
        return Observation(text="\n".join(found) or "no files match")

