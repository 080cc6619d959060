"""``glob``: find files by name pattern, respecting ``.gitignore``."""

from __future__ import annotations

import contextlib
import re
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pathspec
from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import resolve
from tools.ignore import outside_line, walk
from tools.workspace import (
    CONTROL_CHARACTERS,
    PathRefused,
    display_given,
    name_from_display,
    pattern_from_display,
)

MAX_RESULTS = 500
_STAND_INS = {ord(ch): 0xD800 + i for i, ch in enumerate(CONTROL_CHARACTERS)}
"""Control characters, in a pattern and in a name alike, are matched as stand-ins: pathspec
strips trailing whitespace from a pattern (a newline or tab that ends a name) and its '$'
matches before a final newline ('a.py' took the file 'a.py\\n' too). High surrogates are no
whitespace and no name holds one (an undecodable byte is a low one, U+DCNN)."""


_BACKSLASH_PAIR = re.compile(r"\\(.|$)", re.DOTALL)
_GLOB_ESCAPED = frozenset("\\*?[]!# -^")
"""What a backslash escapes in a git glob; before anything else (or at the end) a backslash
is taken as itself, as a shown name has it: 'x\\y.py' from a listing read as 'xy.py'."""


def _literal_backslash(m: re.Match[str]) -> str:
    # Doubled, the backslash is one literal backslash to pathspec.
    return m[0] if m[1] and m[1] in _GLOB_ESCAPED else "\\\\" + m[1]


def _spec(pattern: str) -> pathspec.GitIgnoreSpec:
    """``pattern`` (control characters already stand-ins) as a git wildmatch spec; raises
    ``ValueError`` or ``re.error`` for one that is no pattern ('!', '[z-a]')."""
    return pathspec.GitIgnoreSpec.from_lines([pattern])


def name_matcher(pattern: str, files_only: bool = False) -> Callable[[str], bool]:
    """Whether a path (relative to where the search starts, '/'-separated) matches the glob
    ``pattern`` with git wildmatch semantics ('**' spans folders; a pattern without '/'
    matches at any depth; one starting with '/' only from the start). ``files_only``: the
    path itself must match, not only a folder it is in ('**/*.py' takes no
    'lib.py/readme.txt'), unless the pattern names folders ('tests/').

    A name as the tools show it ('\\xNN' escapes, a backslash before a character it does not
    escape in a glob) is read back into the name's own characters, so a name copied from a
    listing matches its file; and the pattern and the
    path also match with both in NFC, so 'ação*' typed composed finds a name written
    decomposed (as macOS writes names) and the other way round. A name that holds glob
    characters ('a[1].py', 'what?.md') matches itself too, copied as listed: as a pattern it
    named only other names ('a1.py'). Raises :class:`ToolError` for a pattern that is none,
    or one holding a lone surrogate."""
    try:
        shown = pattern.removeprefix("./")
        text = _BACKSLASH_PAIR.sub(_literal_backslash, pattern_from_display(shown))
        literal = name_from_display(shown)
    except PathRefused as exc:
        raise ToolError(f"invalid glob pattern: {exc}") from None
    try:
        spec = composed = _spec(text.translate(_STAND_INS))
    except (ValueError, re.error) as exc:
        raise ToolError(f"invalid glob pattern {pattern!r}: {exc}") from None
    # Composed, a pattern may be none ('[ē\u0301-\u0302]' becomes a range in the wrong
    # order): then it is matched only as written.
    with contextlib.suppress(ValueError, re.error):
        if not unicodedata.is_normalized("NFC", text):
            composed = _spec(unicodedata.normalize("NFC", text).translate(_STAND_INS))

    check = _file_itself if files_only and not text.endswith("/") else _any_match

    def matches(name: str) -> bool:
        if check(spec, name.translate(_STAND_INS)):
            return True
        # Without a '/', at any depth, as the glob itself is; with a first '/', from the start.
        if literal in (name, name.rsplit("/", 1)[-1] if "/" not in literal else None,
                       "/" + name):
            return True
        if name.isascii() or unicodedata.is_normalized("NFC", name):
            # Already composed: only a pattern that composing changed can match otherwise.
            return composed is not spec and check(composed, name.translate(_STAND_INS))
        return check(composed, unicodedata.normalize("NFC", name).translate(_STAND_INS))
    return matches


def _any_match(spec: pathspec.GitIgnoreSpec, name: str) -> bool:
    return spec.match_file(name)


def _file_itself(spec: pathspec.GitIgnoreSpec, name: str) -> bool:
    """Whether ``spec`` matches ``name`` itself: pathspec marks a match that holds only
    through a folder above it with the group 'ps_d'; the last matching pattern decides, as in
    git."""
    found = False
    for p in spec.patterns:
        hit = p.include is not None and p.regex.search(name)
        if hit and hit.groupdict().get("ps_d") is None:
            found = bool(p.include)
    return found


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
            raise ToolError(f"{display_given(args.path)} is not a directory")
        matches = name_matcher(args.pattern)
        found: list[str] = []
        files = 0

        def skipped(link: Path) -> None:
            # A folder link may hold matches; a file link is named only when it would match.
            if link.is_dir() or matches(link.relative_to(start).as_posix()):
                found.append(outside_line(link, self.ctx.workspace.relative(link)))

        for path in walk(self.ctx.workspace.root_of(start), start, outside=skipped):
            if matches(path.relative_to(start).as_posix()):
                if files >= MAX_RESULTS:  # only claim a cap when a file is dropped
                    found.append(f"[stopped at {MAX_RESULTS} files; narrow the pattern]")
                    break
                files += 1
                found.append(self.ctx.workspace.relative(path))
        return Observation(text="\n".join(found + ([] if files else ["no files match"])))

