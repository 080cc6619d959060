"""``undo_edit``: restore a file to its contents before the last edit by a tool."""

from __future__ import annotations

from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import resolve
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
        previous = history.pop()
        rel = self.ctx.workspace.relative(path)
        if previous is None:
            path.unlink(missing_ok=True)
            return Observation(text=f"removed {rel} (it did not exist before)")
        self.ctx.workspace.atomic_write(path, previous)
        return Observation(text=f"restored {rel} to its contents before the last edit")
