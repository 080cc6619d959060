"""``create``: write a new file (or replace one), creating parent directories."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from pydantic import Field, PrivateAttr, model_validator

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import check_seen, diff_preview, read_text, resolve, write_recorded
from tools.textfile import TextFile, encode
from tools.workspace import display_given


def lines_label(text: str) -> str:
    """How many lines ``text`` holds as ``view`` numbers them, in words ("1 line", "2 lines"):
    a final newline ends the last line rather than starting another."""
    n = text.count("\n") + (bool(text) and not text.endswith("\n"))
    return f"{n} line" if n == 1 else f"{n} lines"


_FENCED = re.compile(r"\A[ \t]*\n?(`{3,})[\w+.-]*[ \t]*\n(.*?\n)?[ \t]*\1[ \t]*\n?\s*\Z",
                     re.DOTALL)
"""A whole content wrapped in one markdown fence (```python ... ```)."""
PROSE_SUFFIXES = frozenset({".md", ".markdown", ".txt", ".rst", ""})
"""Files whose content may well be a fenced block."""


class CreateArgs(ToolArgs):
    path: str = Field(description="File to write, relative to the workspace root.")
    file_text: str = Field(description="The complete contents of the file.")
    _unfenced: bool = PrivateAttr(False)

    @model_validator(mode="after")
    def _drop_fence(self) -> CreateArgs:
        """A code file's content wrapped whole in a markdown fence loses the fence: a small
        model shown files in fences wrote the fence into test_pagination.py (Qwen2.5-Coder-1.5B,
        issue 49), which then did not parse. Markdown and text files keep theirs."""
        match = _FENCED.match(self.file_text)
        if match and PurePosixPath(self.path).suffix.lower() not in PROSE_SUFFIXES:
            self.file_text, self._unfenced = match.group(2) or "", True
        return self


@dataclass
class _Plan:
    """What a create would do: the file, its workspace-relative name, the bytes to write, and
    the file as it is (None: there is none)."""

    path: Path
    rel: str
    data: bytes
    before: TextFile | None
    old: bytes | None


class Create(Tool):
    name = "create"
    description = "Create a file with the given contents (replaces the file if it exists)."
    Args = CreateArgs
    mutates = True

    def run(self, args: CreateArgs) -> Observation:
        plan = self._plan(args)
        # Replacing a file loses what it holds unless the model has seen it as it is now
        # (tools.edits: a file it never saw asks for a view too). The same bytes again lose
        # nothing: no view is asked for.
        if plan.old is not None and plan.old != plan.data:
            check_seen(self.ctx, plan.path, args.path, plan.old, unseen_ok=False)
        write_recorded(self.ctx, plan.path, plan.data)
        label = lines_label(args.file_text)
        # Compared as bytes, as written: "replaced" for a file left as it was misled the user
        # and the model alike (a weak model rewrites a file it has just written).
        note = " (the markdown fence around the content was left out)" if args._unfenced \
            else ""
        if plan.old == plan.data:
            # An error, so the model and the task's ledger see that nothing changed: the 1.5B
            # wrote back the file it had just been shown, call after call, as if that were
            # the change the task asked for.
            return Observation(is_error=True, text=(
                f"unchanged {plan.rel} ({label}, the same content){note}: nothing was "
                "written; if the task asks for a change to it, write the changed content"))
        verb = "created" if plan.before is None else "replaced"
        return Observation(text=f"{verb} {plan.rel} ({label}){note}")

    def preview(self, args: CreateArgs) -> str | None:
        """For a file that exists, what replacing it changes, as a diff (every line it removes
        shown, like the other edits); "" when its content stays the same. None for a new file
        (nothing is removed: its text is the change) or a call that would fail."""
        plan = self._plan(args)
        if plan.before is None:
            return None
        if plan.old == plan.data:
            return ""
        # The text as encode writes it: CRLF from the model is one line ending in a CRLF file.
        after = args.file_text.replace("\r\n", "\n") if plan.before.newline != "\n" \
            else args.file_text
        # Only line endings differ (a file that mixed them): still a change, said as one.
        return diff_preview(plan.rel, plan.before.text, after) or \
            f"--- a/{plan.rel}\n+++ b/{plan.rel}\n(the same lines; only line endings change)"

    def _plan(self, args: CreateArgs) -> _Plan:
        """Resolve, then read the file if it exists; ToolError when the call cannot be made.
        The path is confined (symlinks resolved) before anything is read: the comparison
        must never tell about a file outside the workspace."""
        path = resolve(self.ctx, args.path)
        if path.is_dir():
            raise ToolError(f"{display_given(args.path)} is a directory")
        existed = path.is_file()
        # An existing file keeps its encoding and line endings.
        before = read_text(self.ctx, path, args.path) if existed else None
        data = encode(before or TextFile("", "utf-8", "\n", False), args.file_text)
        old = self.ctx.workspace.read_bytes(path) if existed else None
        return _Plan(path, self.ctx.workspace.relative(path), data, before, old)
