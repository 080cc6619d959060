"""The tool protocol shared by every tool, and the context tools run in."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, field_validator

from tools.workspace import Workspace


def clean_schema(schema: Any) -> Any:
    """A pydantic JSON schema without ``title`` keys (noise for the model and the grammar)."""
    if isinstance(schema, dict):
        return {k: clean_schema(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [clean_schema(v) for v in schema]
    return schema


class ToolError(Exception):
    """What the model did wrong (bad path, no match, …); returned to it as an error observation."""


class ToolArgs(BaseModel):
    """Base of every tool's arguments: unknown keys are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class Observation(BaseModel):
    """A tool's result as the model will read it (lone surrogates, from file names or output
    that are not UTF-8, become ``\\udcNN`` escapes: the text must serialise as JSON)."""

    text: str
    is_error: bool = False
    protected: bool = False
    """Keep verbatim through compaction (a skill's instructions)."""

    @field_validator("text")
    @classmethod
    def _serialisable(cls, text: str) -> str:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
        return text


@dataclass
class ToolContext:
    """State shared by the tools of one session."""

    workspace: Workspace
    edit_history: dict[Path, list[bytes | None]] = field(default_factory=dict)
    """Per file, the previous contents before each edit (None: the file did not exist)."""
    seen: dict[Path, bytes] = field(default_factory=dict)
    """Per file, the SHA-256 of the bytes the file tools last saw of it: after a view (a
    ``view_range`` counts) or their own write. An edit of a file whose bytes differ from this
    is refused (someone else changed it since; see :func:`tools.edits.check_seen`). Empty in
    a new or resumed session: a file is then "never viewed"."""
    env: dict[str, str | None] = field(default_factory=dict)
    """Variables set (a string) or removed (None) for the processes the tools start, on top of
    the filtered environment (a new project's own ``.venv`` first on PATH)."""


class Tool(ABC):
    """A tool: a name, a description for the model, a pydantic ``Args`` model and ``run``.

    Subclasses set the class attributes and implement :meth:`run`, raising :class:`ToolError`
    for mistakes the model can correct.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[BaseModel]]
    mutates: ClassVar[bool] = False
    """True for tools that change files (edits) — approval policies look at this."""

    def __init__(self, ctx: ToolContext):
        self.ctx = ctx

    def parameters(self) -> dict[str, Any]:
        """JSON schema (object) of the arguments; the default derives it from ``Args``.

        Tools whose schema is only known at run time (MCP tools, the skill catalog) override
        this and :meth:`parse`."""
        return clean_schema(self.Args.model_json_schema())

    def parse(self, arguments: dict[str, Any]) -> Any:
        """Validated arguments for :meth:`run`.

        Raises pydantic's ``ValidationError`` or :class:`ToolError` (both reach the model)."""
        return self.Args.model_validate(arguments)

    def preview(self, args: Any) -> str | None:
        """What :meth:`run` with ``args`` would change, as a unified diff numbered like the
        file (shown before an edit runs), or None: the tool changes no file, or the call would
        fail. Must not change anything."""
        return None

    @abstractmethod
    def run(self, args: Any) -> Observation:
        """Execute with ``args`` from :meth:`parse`; raise :class:`ToolError` for mistakes the
        model can correct."""
