"""``undo_edit``: restore a file to its contents before the last edit by a tool."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import last_seen, remember, resolve
from tools.workspace import display_given


class UndoEditArgs(ToolArgs):
    path: str = Field(description="File whose last edit should be reverted.")


class UndoEdit(Tool):
    name = "undo_edit"
    description = "Revert the last create/str_replace/insert made to a file in this session."
    Args = UndoEditArgs
    mutates = True

    def run(self, args: UndoEditArgs) -> Observation:
        path = resolve(self.ctx, args.path)
        history = self.ctx.edit_history.get(path)
        if not history:
            raise ToolError(f"no edit of {display_given(args.path)} to undo in this session")
        self._check_unchanged(path, args.path)
        previous = history.pop()
        rel = self.ctx.workspace.relative(path)
        if previous is None:
            path.unlink(missing_ok=True)
            self.ctx.seen.pop(path, None)
            return Observation(text=f"removed {rel} (it did not exist before)")
        self.ctx.workspace.atomic_write(path, previous)
        remember(self.ctx, path, previous)
        return Observation(text=f"restored {rel} to its contents before the last edit")

    def _check_unchanged(self, path: Path, given: str) -> None:
        """Refuse when the file no longer holds what the tools last saw of it (their own
        last write, or a view since): undo writes back older bytes, which would drop a change
        made since by the user or a formatter (tools.edits). No record also refuses: the
        record goes when a command of the model's changed the file (forget_changed), and
        whatever it changed is then as unseen. A view makes the undo an informed one. A file
        that is gone holds nothing to lose."""
        if not path.is_file():
            return
        if last_seen(self.ctx, path, self.ctx.workspace.read_bytes(path)):
            return
        raise ToolError(f"{display_given(given)} has changed since your last edit of it (by "
                        "the user, a formatter, another program or a command you ran); view "
                        "it first: undo_edit would discard that change. Nothing was written.")
