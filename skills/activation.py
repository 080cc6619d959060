"""Tiers 2 and 3 of progressive disclosure: the ``activate_skill`` tool and what an active
skill changes for the session.

Activating returns the skill's body, its folder and its file list as the tool result (the
system prompt never changes, so the prefix cache stays warm); the folder becomes a read-only
root for the file tools; ``allowed-tools`` pre-approves the listed tools while the skill is
active. Names in ``allowed-tools`` may be ours or Claude Code's (``Read``, ``Bash(git add:*)``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from skills.loader import Skill
from skills.trust import is_trusted
from tools.base import Observation, Tool, ToolArgs, ToolContext, ToolError

TOOL_NAME = "activate_skill"
CLIENT_TOOL_NAMES: dict[str, tuple[str, ...]] = {
    "read": ("view",), "ls": ("view",), "write": ("create",),
    "edit": ("str_replace", "insert", "undo_edit"),
    "multiedit": ("str_replace", "insert", "undo_edit"),
    "bash": ("bash",), "grep": ("grep",), "glob": ("glob",),
}
"""Claude Code / OpenCode tool names (lower-cased) → ours; our own names map to themselves."""
_ENTRY = re.compile(r"([A-Za-z_][\w-]*)(?:\(([^)]*)\))?")
_CHAINING = re.compile(r"[;&|`$<>\n]")
"""Shell syntax that could append a second command to an allowed one."""


@dataclass(frozen=True)
class Permission:
    """One ``allowed-tools`` entry: a tool of ours and an optional argument pattern."""

    tool: str
    pattern: str | None = None
    """For bash: ``prefix:*`` or an exact command (``*`` wildcards allowed); for file tools:
    a glob on the ``path`` argument."""

    def allows(self, call: Mapping[str, Any]) -> bool:
        """Whether the tool call ``{"name", "arguments"}`` is covered."""
        if call.get("name") != self.tool:
            return False
        if self.pattern is None:
            return True
        args = call.get("arguments") or {}
        if self.tool == "bash":
            command = str(args.get("command", "")).strip()
            if _CHAINING.search(command):
                return False
            if self.pattern.endswith(":*"):
                prefix = self.pattern[:-2].strip()
                return command == prefix or command.startswith(prefix + " ")
            return fnmatch.fnmatchcase(command, self.pattern)
        return fnmatch.fnmatchcase(str(args.get("path", "")), self.pattern)


def parse_allowed_tools(entries: list[str], known: set[str]) -> tuple[list[Permission],
                                                                        list[str]]:
    """``(permissions, unknown entries)`` from ``allowed-tools`` entries (already split; an
    entry such as ``Bash(git add:*)`` may have been split at its space, so they are re-joined
    first). ``known`` are the tool names of the session."""
    text = " ".join(entries)
    permissions, unknown = [], []
    for match in _ENTRY.finditer(text):
        name, pattern = match.group(1), match.group(2)
        ours = (name,) if name in known else CLIENT_TOOL_NAMES.get(name.lower(), ())
        ours = tuple(t for t in ours if t in known)
        if not ours:
            unknown.append(match.group(0))
        permissions += [Permission(t, pattern.strip() if pattern else None) for t in ours]
    return permissions, unknown


def skill_content(skill: Skill, permissions: list[Permission]) -> str:
    """The text the model receives on activation: folder, files, permissions and the body."""
    files = skill.resources()
    lines = [f'<skill name="{skill.name}">',
             f"Skill folder: {skill.folder} (read it with view, grep and glob using absolute "
             "paths; it is read-only, so write your files in the workspace). Relative paths in "
             "the instructions are inside this folder; run its scripts with bash by absolute "
             f"path, e.g. python3 {skill.folder}/scripts/NAME.py."]
    lines.append("Files: " + (", ".join(files) if files else "(none besides SKILL.md)"))
    if permissions:
        lines.append("Pre-approved while this skill is active: " + ", ".join(
            p.tool + (f"({p.pattern})" if p.pattern else "") for p in permissions))
    elif skill.allowed_tools:
        lines.append("Its allowed-tools pre-approve nothing (a project skill the user has not "
                     "trusted): its tool calls need the usual approval.")
    lines += ["", skill.body, "</skill>"]
    return "\n".join(lines)


class Activations:
    """The skills a session may activate and the ones it has activated.

    ``skills`` are all discovered skills (``--skill`` may force any of them); ``catalog`` are
    the names the model was shown and may pick. ``ctx`` is the tools' context (its workspace
    gains each active skill's folder as a read-only root)."""

    def __init__(self, skills: Mapping[str, Skill], catalog: list[str], ctx: ToolContext,
                 known_tools: set[str]):
        self.skills, self.catalog, self.ctx = dict(skills), list(catalog), ctx
        self.known_tools = set(known_tools)
        self.active: dict[str, list[Permission]] = {}

    def activate(self, name: str) -> Observation:
        """Activate ``name``: its content (protected from compaction) the first time, a short
        note after that. Raises :class:`ToolError` for an unknown name."""
        skill = self.skills.get(name)
        if skill is None:
            raise ToolError(f"there is no skill '{name}'; skills: "
                            + (", ".join(self.catalog) or "none"))
        if name in self.active:
            return Observation(text=f"skill '{name}' is already active: its instructions are "
                               "earlier in this conversation; follow them")
        self.restore(name)
        return Observation(text=skill_content(skill, self.active[name]), protected=True)

    def restore(self, name: str) -> None:
        """Mark ``name`` active without producing its content (a resumed session whose
        history already holds it); unknown names are ignored."""
        skill = self.skills.get(name)
        if skill is None:
            return
        self.ctx.workspace.add_read_only_root(skill.folder)
        # A repository's own skill pre-approves nothing until the user trusts its folder:
        # otherwise text from a clone could approve commands (skills/trust.py).
        self.active[name] = (parse_allowed_tools(skill.allowed_tools, self.known_tools)[0]
                             if is_trusted(skill) else [])

    def preapproved(self, call: Mapping[str, Any]) -> bool:
        """Whether an active skill's ``allowed-tools`` covers the tool call."""
        return any(p.allows(call) for perms in self.active.values() for p in perms)


class ActivateArgs(ToolArgs):
    name: str = Field(description="Name of a skill from the catalog in the system prompt.")


class ActivateSkill(Tool):
    """``activate_skill``: load a skill's instructions; ``name`` is an enum of the catalog."""

    name = TOOL_NAME
    description = ("Load the instructions of a skill listed under Skills in the system prompt; "
                   "call it before starting a task that matches the skill's description.")
    Args = ActivateArgs

    def __init__(self, ctx: ToolContext, activations: Activations):
        super().__init__(ctx)
        self.activations = activations

    def parameters(self) -> dict[str, Any]:
        return {"type": "object",
                "properties": {"name": {"type": "string", "enum": self.activations.catalog,
                                        "description": ActivateArgs.model_fields["name"]
                                        .description}},
                "required": ["name"], "additionalProperties": False}

    def parse(self, arguments: dict[str, Any]) -> ActivateArgs:
        args = ActivateArgs.model_validate(arguments)
        if args.name not in self.activations.catalog:
            raise ToolError(f"'{args.name}' is not in the skill catalog; choose one of: "
                            + ", ".join(self.activations.catalog))
        return args

    def run(self, args: ActivateArgs) -> Observation:
        return self.activations.activate(args.name)
