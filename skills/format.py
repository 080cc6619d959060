"""The SKILL.md file format (Agent Skills specification, agentskills.io): YAML front matter
between ``---`` lines, then a Markdown body.

Front matter is read with PyYAML's ``BaseLoader``: every scalar stays a string (``yes`` is not
a boolean, ``1.0`` not a float), which is what the reference implementation ``skills-ref`` (built
on strictyaml) does too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SKILL_FILE = "SKILL.md"
"""The file that makes a folder a skill (``skill.md`` is accepted too, as ``skills-ref`` does)."""
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
SPEC_FIELDS = frozenset({"name", "description", "license", "allowed-tools", "metadata",
                         "compatibility"})
"""The front-matter keys the specification defines; others come from other clients."""
BOM = "\ufeff"


class FrontMatterError(ValueError):
    """The front matter is missing, not closed, not YAML, or not a mapping."""


@dataclass
class SkillText:
    """A SKILL.md split into its parts."""

    fields: dict[str, Any]
    """Front-matter mapping; values are strings, lists or mappings of strings."""
    body: str
    """The Markdown after the closing ``---``, stripped."""
    had_bom: bool
    had_crlf: bool


def find_skill_file(folder: Path) -> Path | None:
    """``folder/SKILL.md`` (or ``skill.md``), or None when the folder has neither."""
    for name in (SKILL_FILE, SKILL_FILE.lower()):
        path = folder / name
        if path.is_file():
            return path
    return None


def split_front_matter(text: str) -> tuple[str, str]:
    """``(yaml_text, body)`` of a SKILL.md whose first line is ``---``; line ends must already
    be ``\\n``. Raises :class:`FrontMatterError` when it does not start with ``---`` or the
    closing ``---`` line is missing."""
    if not text.startswith("---"):
        raise FrontMatterError("SKILL.md must start with YAML frontmatter (---)")
    lines = text.split("\n")
    for i in range(1, len(lines)):
        if lines[i].rstrip() == "---":
            return "\n".join(lines[1:i]) + "\n", "\n".join(lines[i + 1:]).strip()
    raise FrontMatterError("SKILL.md frontmatter not properly closed with ---")


_STRICT_TOKENS: dict[type, str] = {
    yaml.FlowMappingStartToken: "flow-style mappings ({...})",
    yaml.FlowSequenceStartToken: "flow-style sequences ([...])",
    yaml.AnchorToken: "anchors (&name)",
    yaml.AliasToken: "aliases (*name)",
    yaml.TagToken: "tags (!tag)",
}


def strict_yaml_problems(source: str) -> list[str]:
    """YAML features outside the strict subset the reference validator accepts (strictyaml):
    flow style, anchors, aliases, tags and duplicate keys; each with its line (1-based, in the
    file, counting the opening ``---`` as line 1). Assumes ``source`` parses as YAML."""
    problems = []
    for token in yaml.scan(source, Loader=yaml.BaseLoader):
        what = _STRICT_TOKENS.get(type(token))
        if what:
            problems.append(f"{what} are not allowed (line {token.start_mark.line + 2})")
    node = yaml.compose(source, Loader=yaml.BaseLoader)
    stack = [node] if node is not None else []
    while stack:
        current = stack.pop()
        if isinstance(current, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in current.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in seen:
                        problems.append(f"duplicate key '{key.value}' "
                                        f"(line {key.start_mark.line + 2})")
                    seen.add(key.value)
                stack.append(value)
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(current.value)
    return problems


def parse_skill_text(raw: str) -> SkillText:
    """Parse a SKILL.md's text leniently: a leading BOM and CRLF line ends are accepted.

    Raises :class:`FrontMatterError` when the front matter is missing, unclosed, not YAML or not
    a mapping."""
    had_bom = raw.startswith(BOM)
    text = raw.removeprefix(BOM)
    had_crlf = "\r\n" in text
    text = text.replace("\r\n", "\n")
    source, body = split_front_matter(text)
    try:
        fields = yaml.load(source, Loader=yaml.BaseLoader)
    except yaml.YAMLError as exc:
        raise FrontMatterError(f"Invalid YAML in frontmatter: {_one_line(exc)}") from exc
    if not isinstance(fields, dict):
        raise FrontMatterError("SKILL.md frontmatter must be a YAML mapping")
    return SkillText(fields=fields, body=body, had_bom=had_bom, had_crlf=had_crlf)


def _one_line(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem} (line {mark.line + 2})" if mark is not None else str(problem)
