"""One registry feeds everything: OpenAI ``tools=``, the JSON schema for grammar-forced calls,
argument validation and dispatch."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tools import diagnostics
from tools.base import Observation, Tool, ToolContext, ToolError
from tools.bash import Bash, BashJobs, BashKill, JobTable
from tools.create import Create
from tools.glob import Glob
from tools.grep import Grep
from tools.insert import Insert
from tools.str_replace import StrReplace
from tools.undo_edit import UndoEdit
from tools.view import View
from tools.workspace import PathRefused, Workspace, display_given, display_name


def format_validation_error(tool: str, exc: ValidationError) -> str:
    """A one-paragraph, field-by-field explanation of invalid arguments."""
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        parts.append(f"{where}: {err['msg']}")
    return f"invalid arguments for {tool}: " + "; ".join(parts)


def _os_error(exc: OSError) -> str:
    """``exc`` in words, its file named as the tools show names (:func:`display_name`): as
    ``str(exc)`` writes it, a name that is not UTF-8 read ``'\\udcf3'``, which no file tool
    takes back."""
    if not isinstance(exc.filename, str) or exc.filename2 is not None or exc.errno is None:
        return str(exc)
    return f"[Errno {exc.errno}] {exc.strerror}: {display_name(exc.filename)}"


class Registry:
    """Tools by name, in a stable order (the order they were given)."""

    def __init__(self, tools: Iterable[Tool], jobs: JobTable | None = None):
        self.tools: dict[str, Tool] = {}
        self.jobs = jobs
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        """Register ``tool`` after the ones already there.

        Raises ValueError when the name is taken (a silent override would hide a tool)."""
        if tool.name in self.tools:
            raise ValueError(f"tool name '{tool.name}' is already registered")
        self.tools[tool.name] = tool

    def parameters(self, name: str) -> dict[str, Any]:
        """JSON schema of a tool's arguments (object schema)."""
        schema = self.tools[name].parameters()
        schema.setdefault("properties", {})
        return schema

    def openai_tools(self) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` list, stable order and key order."""
        return [{"type": "function",
                 "function": {"name": n, "description": t.description,
                              "parameters": self.parameters(n)}}
                for n, t in self.tools.items()]

    def call(self, name: str, arguments: Any) -> Observation:
        """Validate and run a tool; every failure becomes an error observation for the model."""
        tool = self.tools.get(name)
        if tool is None:
            return Observation(is_error=True, text=f"unknown tool '{name}'; available tools: "
                               + ", ".join(self.tools))
        if not isinstance(arguments, dict):
            return Observation(is_error=True, text=f"arguments for {name} must be a JSON "
                               f"object, got {type(arguments).__name__}")
        try:
            args = tool.parse(arguments)
        except ValidationError as exc:
            return Observation(is_error=True, text=format_validation_error(name, exc))
        except ToolError as exc:
            return Observation(is_error=True, text=f"invalid arguments for {name}: {exc}")
        try:
            before = self._content(tool, args)
            obs = tool.run(args)
            return self._diagnosed(tool, args, obs, before)
        except (ToolError, PathRefused) as exc:
            return Observation(is_error=True, text=str(exc))
        except OSError as exc:
            return Observation(is_error=True, text=f"{name} failed: {_os_error(exc)}")

    @staticmethod
    def _edited(tool: Tool, args: Any) -> tuple[Path, str] | None:
        """The file an edit call names (resolved, and as given), or None: the tool changes
        no file, or the path is refused (the call then fails with the reason)."""
        path = getattr(args, "path", None)
        ctx = getattr(tool, "ctx", None)
        if not tool.mutates or not isinstance(path, str) or not isinstance(ctx, ToolContext):
            return None
        try:
            return ctx.workspace.resolve(path, writable=False), path
        except PathRefused:
            return None

    def _content(self, tool: Tool, args: Any) -> bytes | None:
        """The bytes of the file an edit call is about to change, for the errors it brings in
        (None: no such file, or not an edit)."""
        edited = self._edited(tool, args)
        try:
            if edited is None or not edited[0].is_file() \
                    or edited[0].stat().st_size > diagnostics.MAX_BYTES:
                return None
            return edited[0].read_bytes()
        except OSError:
            return None  # the edit itself says what is wrong with the file

    def _diagnosed(self, tool: Tool, args: Any, obs: Observation,
                   before: bytes | None) -> Observation:
        """``obs`` of an edit that worked, with what is wrong with the file now and the errors
        the edit brought in (:mod:`tools.diagnostics`)."""
        edited = self._edited(tool, args)
        if obs.is_error or edited is None:
            return obs
        full, path = edited
        extra = diagnostics.note(full, display_given(path), before)
        return obs.model_copy(update={"text": obs.text + extra}) if extra else obs

    def preview(self, name: str, arguments: Any) -> str | None:
        """What the call would change (:meth:`Tool.preview`: a diff numbered like the file),
        or None when the tool changes no file or the call would fail (it then fails when
        run, with the reason)."""
        tool = self.tools.get(name)
        if tool is None or not isinstance(arguments, dict):
            return None
        try:
            return tool.preview(tool.parse(arguments))
        except (ValidationError, ToolError, PathRefused, OSError):
            return None

    def close(self) -> None:
        """Stop background jobs."""
        if self.jobs:
            self.jobs.stop_all()


def default_registry(workspace: Workspace,
                     env: dict[str, str | None] | None = None) -> Registry:
    """The core tools bound to ``workspace``; ``env``: variables set (a string) or removed
    (None) for the commands they run (:attr:`tools.base.ToolContext.env`)."""
    ctx = ToolContext(workspace=workspace, env=dict(env or {}))
    jobs = JobTable()
    # File tools first: small models lean towards the first options a grammar offers.
    tools: list[Tool] = [View(ctx), Create(ctx), StrReplace(ctx), Insert(ctx), UndoEdit(ctx),
                         Grep(ctx), Glob(ctx), Bash(ctx, jobs), BashJobs(ctx, jobs),
                         BashKill(ctx, jobs)]
    return Registry(tools, jobs)
