"""The tool protocol shared by every tool, and the context tools run in."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from tools.workspace import Workspace


class ToolError(Exception):
    """What the model did wrong (bad path, no match, …); returned to it as an error observation."""


class ToolArgs(BaseModel):
    """Base of every tool's arguments: unknown keys are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid")


class Observation(BaseModel):
    """A tool's result as the model will read it."""

    text: str
    is_error: bool = False


@dataclass
class ToolContext:
    """State shared by the tools of one session."""

    workspace: Workspace
    edit_history: dict[Path, list[bytes | None]] = field(default_factory=dict)
    """Per file, the previous contents before each edit (None: the file did not exist)."""


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

    @abstractmethod
    def run(self, args: BaseModel) -> Observation:
        """Execute with validated ``args``; raise :class:`ToolError` for correctable mistakes."""
