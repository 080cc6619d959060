"""``str_replace``: replace one unique occurrence of a text in a file."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from tools.base import Observation, Tool, ToolArgs, ToolError
from tools.edits import diff_preview, read_text, resolve, snippet, write_recorded
from tools.matching import Ambiguous, Match, closest_region, find_and_replace
from tools.textfile import TextFile, encode


class StrReplaceArgs(ToolArgs):
    path: str = Field(description="File to edit, relative to the workspace root.")
    old_str: str = Field(description="Exact text to replace; must occur once in the file.")
    new_str: str = Field(description="Replacement text.")


class StrReplace(Tool):
    name = "str_replace"
    description = ("Replace the single occurrence of old_str in a file with new_str. Include "
                   "enough surrounding lines to make old_str unique.")
    Args = StrReplaceArgs
    mutates = True

    def run(self, args: StrReplaceArgs) -> Observation:
        path, tf, rel, result = self._replace(args, guard=True)
        write_recorded(self.ctx, path, encode(tf, result.text))
        how = "" if result.stage == "exact" else f" (matched ignoring {result.stage})"
        return Observation(text=f"edited {rel}{how}:\n"
                           + snippet(result.text, result.first_line, result.last_line))

    def preview(self, args: StrReplaceArgs) -> str:
        """The edit as :meth:`run` would make it (tolerant matching included), as a diff."""
        _, tf, rel, result = self._replace(args)
        encode(tf, result.text)  # raises, as run would, when the encoding cannot hold it
        return diff_preview(rel, tf.text, result.text)

    def _replace(self, args: StrReplaceArgs,
                 guard: bool = False) -> tuple[Path, TextFile, str, Match]:
        """The file, its text, its workspace-relative name and the replacement; ToolError when
        the edit cannot be made (``guard``, for a run: also when someone else changed the
        file since the model last saw it, checked before old_str, whose mismatch would then
        be the change's doing; see :mod:`tools.edits`)."""
        path = resolve(self.ctx, args.path)
        tf = read_text(self.ctx, path, args.path, guard)
        rel = self.ctx.workspace.relative(path)
        old = args.old_str.replace("\r\n", "\n")
        new = args.new_str.replace("\r\n", "\n")
        if not old:
            raise ToolError("old_str is empty; give the exact text to replace (use insert or "
                            "create to add new text)")
        if old == new:
            raise ToolError("old_str and new_str are identical; nothing would change")
        result = find_and_replace(tf.text, old, new)
        if isinstance(result, Ambiguous):
            where = ", ".join(str(n) for n in result.lines[:10])
            raise ToolError(f"old_str matches {len(result.lines)} places in {rel} (lines "
                            f"{where}); add surrounding lines so it matches exactly one")
        if result is None:
            raise ToolError(self._no_match(tf.text, old, new, rel))
        return path, tf, rel, result

    @staticmethod
    def _no_match(text: str, old: str, new: str, rel: str) -> str:
        if new.strip() and new in text:
            line = text[: text.find(new)].count("\n") + 1
            return (f"old_str was not found in {rel}, but new_str is already present at line "
                    f"{line}: the edit may already be applied")
        first, last, ratio = closest_region(text, old)
        return (f"old_str was not found in {rel} (not even ignoring whitespace, indentation "
                f"or typographic punctuation). The most similar region ({ratio:.0%} similar) "
                f"is lines {first}-{last}:\n{snippet(text, first, last, context=0)}\n"
                "Copy the text exactly from the file with the view tool and retry.")
