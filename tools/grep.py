"""``grep``: regular-expression search over the workspace's non-ignored text files."""

from __future__ import annotations

import contextlib
import re
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath

from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import resolve
from tools.glob import name_matcher
from tools.ignore import outside_line, walk
from tools.secretfiles import skipped_by_search
from tools.textfile import decode, looks_binary
from tools.workspace import PathRefused, display_given, name_from_display

MAX_MATCHES = 200
MAX_FILE_BYTES = 2 * 2**20
"""Files up to this size are decoded whole (like view); bigger ones are searched line by line."""
MAX_SECRETS_NAMED = 10
"""Files skipped as possible secrets that the note after a search names (the rest counted)."""


def _line_matcher(pattern: str, ignore_case: bool) -> Callable[[str], bool]:
    """Whether a line matches ``pattern``, as written or with both in NFC: "ação" typed
    composed finds a file written decomposed ("a" + U+0303, as macOS and some editors save
    it) and the other way round, while a search for a combining mark itself still finds it
    in the line as written. Raises ``re.error`` for a bad pattern."""
    flags = re.IGNORECASE if ignore_case else 0
    regex = composed = re.compile(pattern, flags)
    # Composed, a pattern may be none ("[ē\u0301-\u0302]" becomes "[ḗ-\u0302]", a range in
    # the wrong order): then it is searched only as written.
    with contextlib.suppress(re.error):
        if not unicodedata.is_normalized("NFC", pattern):
            composed = re.compile(unicodedata.normalize("NFC", pattern), flags)

    def matches(line: str) -> bool:
        if regex.search(line):
            return True
        if line.isascii() or unicodedata.is_normalized("NFC", line):
            # Already composed: only a pattern that composing changed can match otherwise.
            return composed is not regex and composed.search(line) is not None
        return composed.search(unicodedata.normalize("NFC", line)) is not None
    return matches


def _file_filter(glob: str, root_of: Callable[[Path], Path]) -> Callable[[Path], bool]:
    """Whether a file's path matches grep's ``glob`` filter as ``Path.match`` matches it
    (from the right: '*.py' in any folder, 'src/*.py' in any folder named src), where '**'
    spans any number of folders, none too, as in the glob tool ('src/**/*.py'), and not
    one as ``Path.match`` has it before Python 3.13. ``root_of`` gives the root a path is
    under (the path is matched relative to it).

    A name as the tools show it is read back first ('\\xNN' escapes, '\\\\' one
    backslash: ``Path.match`` has no escapes of its own), so a name copied from a listing
    filters to its file; and the pattern and the path also match with both in NFC, so
    'ação*' typed composed takes a name written decomposed and the other way round. Raises
    :class:`ToolError` for a pattern that is none ('.') or holds a lone surrogate."""
    try:
        pattern = name_from_display(glob)
        PurePosixPath("x").match(pattern)  # raises ValueError for an empty pattern ('.')
    except (PathRefused, ValueError) as exc:
        raise ToolError(f"invalid glob {glob!r}: {exc}") from None
    composed = unicodedata.normalize("NFC", pattern)
    # '**', a first '/' (from the root: '/src/*.py') and a last one (the files in folders
    # so named: 'tests/') as the glob tool has them. '**/' first: from the right, as
    # Path.match matches; name_matcher reads the name back.
    anchored = glob.startswith("/")
    spans = name_matcher(glob if anchored or glob.startswith("**")
                         else "**/" + glob.removeprefix("./"), files_only=True) \
        if "**" in pattern or anchored or glob.endswith("/") else None
    # A name holding glob characters ('a[1].py') matches itself too, as the glob tool's does.
    literal = PurePosixPath(pattern).parts

    def matches(path: Path) -> bool:
        if path.match(pattern) or path.parts[-len(literal):] == literal:
            return True
        if spans is not None and spans(str(path.relative_to(root_of(path)))):
            return True
        text = str(path)
        if text.isascii() or unicodedata.is_normalized("NFC", text):
            # Already composed: only a pattern that composing changed can match otherwise.
            return composed != pattern and path.match(composed)
        return PurePosixPath(unicodedata.normalize("NFC", text)).match(composed)
    return matches


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
            matches_line = _line_matcher(args.pattern, args.ignore_case)
        except re.error as exc:
            raise ToolError(f"invalid regular expression {args.pattern!r}: {exc}") from exc
        wanted = _file_filter(args.glob, self.ctx.workspace.root_of) if args.glob else None
        start = resolve(self.ctx, args.path, writable=False)
        if not start.exists():
            raise ToolError(f"{display_given(args.path)} does not exist")
        out: list[str] = []
        matches = 0
        secret: list[str] = []

        def skipped(link: Path) -> None:
            # A folder link may hold matches; a file link is named only when the glob takes it.
            if link.is_dir() or wanted is None or wanted(link):
                out.append(outside_line(link, self.ctx.workspace.relative(link)))

        named = start.is_file()
        files = [start] if named else walk(self.ctx.workspace.root_of(start), start,
                                           outside=skipped)
        for path in files:
            if wanted is not None and not wanted(path):
                continue
            try:
                # A symlink is read at its target, which must be inside the workspace too.
                real = self.ctx.workspace.resolve(path, writable=False)
                if not named and skipped_by_search(self.ctx.workspace, path, real):
                    # Named as grep's path, such a file asks the user first (approval); a walk
                    # must not read it behind that question.
                    secret.append(self.ctx.workspace.relative(path))
                    continue
                lines = self._lines(real)
            except (OSError, PathRefused):
                continue
            if lines is None:
                continue
            rel = self.ctx.workspace.relative(path)
            for n, line in lines:
                if matches_line(line):
                    if matches >= MAX_MATCHES:  # only claim a cap when a match is dropped
                        out.append(f"[stopped at {MAX_MATCHES} matches; narrow the pattern "
                                   "or the path]")
                        return Observation(text="\n".join(out))
                    matches += 1
                    out.append(f"{rel}:{n}: {line[:300]}")
        return Observation(text="\n".join(out + ([] if matches else ["no matches"])
                                          + _secrets_note(secret)))

    def _lines(self, real: Path) -> Iterator[tuple[int, str]] | None:
        """Numbered lines of a text file, decoded and split like view does (BOM, cp1252, CRLF;
        only \\n ends a line, so line numbers agree with view's); None for a binary file.
        Big files stream, so a 100 MiB log is searched too, not skipped."""
        if real.stat().st_size <= MAX_FILE_BYTES:
            data = self.ctx.workspace.read_bytes(real)
            if looks_binary(data):
                return None
            lines = decode(data).text.split("\n")
            if lines[-1] == "":
                lines.pop()
            return enumerate(lines, 1)
        fh = self.ctx.workspace.open_bytes(real)
        if looks_binary(fh.read(8192)):
            fh.close()
            return None
        fh.seek(0)

        def stream() -> Iterator[tuple[int, str]]:
            with fh:
                for n, raw in enumerate(fh, 1):
                    yield n, decode(raw.removesuffix(b"\n")).text.removesuffix("\r")
        return stream()


def _secrets_note(names: list[str]) -> list[str]:
    """The line saying which files the walk skipped as possible secrets, if any: the model
    must know the search was not complete, and how to search one (naming it asks the user)."""
    if not names:
        return []
    shown = ", ".join(names[:MAX_SECRETS_NAMED])
    more = f" and {len(names) - MAX_SECRETS_NAMED} more" if len(names) > MAX_SECRETS_NAMED else ""
    files, they = ("file", "it") if len(names) == 1 else ("files", "they")
    return [f"[{len(names)} {files} not searched, as {they} may hold secrets: {shown}{more}; "
            "grep with one of them as the path searches it, with the user's approval]"]
