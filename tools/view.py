"""``view``: a file with line numbers (optionally a range), or a directory listing."""

from __future__ import annotations

import codecs
import hashlib
import os
from pathlib import Path

from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import remember_digest, resolve, seen_digest
from tools.ignore import ALWAYS_SKIPPED, outside_line, walk
from tools.textfile import decode, looks_binary
from tools.workspace import display_given

PAGE_LINES = 400
MAX_LINE_CHARS = 2000
MAX_ENTRIES = 300
STREAM_BYTES = 32 * 2**20
"""A file larger than this is read line by line, keeping only the lines shown: read whole, a
200 MB log took 800 MB of memory (bytes, text and a string per line)."""
_CHUNK = 2**20


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
        if args.view_range is not None and len(args.view_range) != 2:
            raise ToolError("view_range must be [first_line, last_line]")
        first, last = args.view_range or (1, PAGE_LINES)
        if path.stat().st_size > STREAM_BYTES:
            total, shown, encoding, digest = self._stream(path, args.path, max(first, 1), last)
        else:
            data = self.ctx.workspace.read_bytes(path)
            if looks_binary(data):
                raise _binary(args.path, len(data))
            decoded = decode(data)
            lines = decoded.text.split("\n")
            if lines and lines[-1] == "":
                lines.pop()
            total, encoding, digest = len(lines), decoded.encoding, seen_digest(data)
            end = total if last == -1 else min(last, total)
            shown = {n: _clip(lines[n - 1]) for n in range(max(first, 1), end + 1)}
        if args.view_range is not None and (not 1 <= first <= max(total, 1)
                                            or (last != -1 and last < first)):
            raise ToolError(f"invalid view_range {args.view_range}: the file has "
                            f"{total} lines")
        # Any view of the file, a range or the first page too, is what the model has seen of
        # it: an edit is refused if someone else changes it from now on (tools.edits).
        remember_digest(self.ctx, path, digest)
        body = "\n".join(f"{n:6}\t{line}" for n, line in sorted(shown.items()))
        if args.view_range is None and total > PAGE_LINES:
            body += (f"\n[showing lines 1-{PAGE_LINES} of {total}; use view_range to see "
                     "more]")
        if encoding != "utf-8":
            body = (f"[not valid UTF-8: decoded as {encoding}, a guess; edits may only "
                    "add ASCII or characters already in the file]\n" + body)
        return Observation(text=body or "(empty file)")

    def _stream(self, path: Path, given: str, first: int,
                last: int) -> tuple[int, dict[int, str], str, bytes]:
        """The line count of the large file ``path``, its lines ``first``..``last`` (-1: to
        the end) by number, clipped, the file's encoding as :func:`decode` guesses it and the
        SHA-256 of its bytes. Reads a megabyte at a time; a longer line is kept only to its
        first megabyte (clipped anyway)."""
        digest, total, kept, sizes = hashlib.sha256(), 0, {}, {}
        ending = True  # the last chunk read ended a line
        # Which of decode's encodings every byte fits, checked as the chunks pass.
        checks = {name: codecs.getincrementaldecoder(name)() for name in ("utf-8", "cp1252")}
        head = b""  # the first 8 KiB, for looks_binary (a peek may see only 4)
        with self.ctx.workspace.open_bytes(path) as fh:
            while chunk := fh.readline(_CHUNK):
                if len(head) < 8192:
                    head += chunk[:8192 - len(head)]
                    if looks_binary(head):
                        raise _binary(given, path.stat().st_size)
                digest.update(chunk)
                for name, check in list(checks.items()):
                    try:
                        check.decode(chunk)
                    except UnicodeDecodeError:
                        del checks[name]
                if ending:
                    total += 1
                    if first <= total and (last == -1 or total <= last):
                        kept[total] = chunk
                elif total in kept:
                    sizes[total] = sizes.get(total, len(kept[total])) + len(chunk)
                    # Counted as the line's text, without its line break.
                    sizes[total] -= 2 if chunk.endswith(b"\r\n") else chunk.endswith(b"\n")
                ending = chunk.endswith(b"\n")
        for name, check in list(checks.items()):
            try:
                check.decode(b"", final=True)  # a character cut off at the end
            except UnicodeDecodeError:
                del checks[name]
        encoding = next(iter(checks), "latin-1")
        shown = {}
        for n, raw in kept.items():
            raw = raw.removeprefix(b"\xef\xbb\xbf") if n == 1 else raw
            raw = raw[:-2] if raw.endswith(b"\r\n") else raw.removesuffix(b"\n")
            # A line cut at a read may end inside a character.
            text = raw.decode(encoding, "ignore" if n in sizes else "strict")
            shown[n] = (_clip(text) if n not in sizes else
                        text[:MAX_LINE_CHARS] + f" [line clipped: {sizes[n]} bytes]")
        return total, shown, encoding, digest.digest()

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
        if entries:
            return "\n".join(entries)
        try:
            hidden = sum(1 for entry in os.scandir(path) if entry.name not in ALWAYS_SKIPPED)
        except OSError:
            hidden = 0
        # "(empty directory)" of a folder of ignored files sent the model to recreate them.
        said = "entry here is" if hidden == 1 else "entries here are"
        return (f"(nothing listed: the {hidden} {said} ignored by git; view one by its name to "
                "read it)" if hidden else "(empty directory)")


def _binary(given: str, size: int) -> ToolError:
    return ToolError(f"{display_given(given)} is a binary file ({size} bytes); not shown")


def _clip(line: str) -> str:
    if len(line) <= MAX_LINE_CHARS:
        return line
    return line[:MAX_LINE_CHARS] + f" [line clipped: {len(line)} chars]"
