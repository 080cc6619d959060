"""The SKILL.md file format (Agent Skills specification, agentskills.io): YAML front matter
between ``---`` lines, then a Markdown body.

Front matter is read with PyYAML's ``BaseLoader``: every scalar stays a string (``yes`` is not
a boolean, ``1.0`` not a float), which is what the reference implementation ``skills-ref`` (built
on strictyaml) does too.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SKILL_FILE = "SKILL.md"
"""The file that makes a folder a skill (``skill.md`` is accepted too, as ``skills-ref`` does)."""
MAX_NAME = 64
MAX_DESCRIPTION = 1024
MAX_COMPATIBILITY = 500
MAX_SKILL_FILE = 1 << 20
"""Bytes a SKILL.md may hold (the spec asks for under 5,000 tokens of body): a cloned
repository controls the file, and a huge one would be read whole into memory at start-up."""
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
    source: str
    """The front matter's YAML text (for :func:`strict_yaml_problems`)."""
    body: str
    """The Markdown after the closing ``---``, stripped."""
    had_bom: bool
    had_crlf: bool


class SkillFileError(ValueError):
    """A file of a skill that is not a readable regular file of a sane size; the message completes
    a sentence that starts with the file's name ("is a folder, not a regular file")."""


def find_skill_file(folder: Path) -> Path | None:
    """``folder/SKILL.md`` (or ``skill.md``), a regular file preferred; None when neither name
    is there. One there in another form (a folder, a FIFO, a broken link) is returned too: the
    folder is meant to be a skill, and reading the file says what is wrong, where passing it
    over would make the skill vanish without a word."""
    present = [folder / name for name in (SKILL_FILE, SKILL_FILE.lower())
               if os.path.lexists(folder / name)]
    return next((p for p in present if os.path.isfile(p)), present[0] if present else None)


def folder_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a skill folder (missing, a symlink loop, a link to nothing, not a
    folder, not listable), worded for the user; None when it can be. Loops and unreadable
    folders are a cloned repository's to create, so they get a reason, never an exception."""
    try:
        info = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"Path is a symlink loop: {path}"
        if os.path.islink(path):
            return f"Path is a symlink to nothing: {path} -> {os.readlink(path)}"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return f"Path does not exist: {path}"
        return f"Path cannot be read: {path} ({exc.strerror})"
    if not stat.S_ISDIR(info.st_mode):
        return f"Not a directory: {path}"
    try:
        with os.scandir(path):
            return None
    except OSError as exc:
        return f"Path cannot be read: {path} ({exc.strerror})"


_FILE_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a device",
               stat.S_IFBLK: "a device"}
"""What a SKILL.md that opens but is not a regular file is (a socket does not open)."""


def read_regular_file(path: Path, limit: int) -> bytes:
    """At most ``limit + 1`` bytes of ``path`` (one past the limit, so the caller can tell a
    file that is too large), read only when it is a regular file: a cloned repository controls
    skill folders, and a FIFO would block the read forever, a link to ``/dev/zero`` never end
    it, a huge file fill memory. The file is opened non-blocking (a FIFO's open waits for a
    writer otherwise) and checked through the open descriptor, so a swap after a check
    changes nothing. Raises :class:`SkillFileError` saying what the file is instead."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SkillFileError("is a symlink loop") from None
        if os.path.islink(path) and exc.errno == errno.ENOENT:
            raise SkillFileError(f"is a symlink to nothing ({os.readlink(path)})") from None
        raise SkillFileError(f"cannot be read ({exc.strerror})") from None
    try:
        kind = stat.S_IFMT(os.fstat(fd).st_mode)
        if kind != stat.S_IFREG:
            raise SkillFileError(f"is {_FILE_KINDS.get(kind, 'a special file')}, "
                                 "not a regular file")
        with open(fd, "rb", closefd=False) as file:
            return file.read(limit + 1)
    except OSError as exc:
        raise SkillFileError(f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def read_skill_file(path: Path) -> bytes:
    """The bytes of the SKILL.md ``path``: a regular file of at most :data:`MAX_SKILL_FILE`
    bytes (see :func:`read_regular_file`). Raises :class:`SkillFileError`."""
    data = read_regular_file(path, MAX_SKILL_FILE)
    if len(data) > MAX_SKILL_FILE:
        raise SkillFileError(f"is larger than {MAX_SKILL_FILE >> 20} MiB")
    return data


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
    return SkillText(fields=fields, source=source, body=body, had_bom=had_bom,
                     had_crlf=had_crlf)


def _one_line(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"{problem} (line {mark.line + 2})" if mark is not None else str(problem)
