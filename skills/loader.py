"""Loading skills leniently and discovering them in the three places they live.

Loading follows the client-implementation advice of the Agent Skills specification: a skill that
is usable but imperfect (name and folder differ, name breaks the naming rules, description too
long) loads with warnings; keys from other clients and non-string metadata are tolerated
silently (``agent skills validate`` reports them); one that cannot be used (no front matter,
unparsable YAML, no description) is skipped with the reason.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from skills.format import (
    FrontMatterError,
    SkillFileError,
    find_skill_file,
    folder_problem,
    parse_skill_text,
    read_skill_file,
    strict_yaml_problems,
)
from skills.validate import description_errors, name_errors

Source = Literal["bundled", "user", "project"]
BUNDLED_DIR = Path(__file__).parent / "bundled"
MAX_DEPTH = 4
"""Folder levels searched below a skills root (a skill folder itself is not searched)."""
MAX_FOLDERS = 2000
"""Folders visited per root at most, so a huge tree cannot stall start-up."""
MAX_RESOURCES = 200
SKIPPED_FOLDERS = {".git", "node_modules", "__pycache__", ".venv", "venv"}


class SkillLoadError(ValueError):
    """The folder's SKILL.md cannot be used; the message says why."""


@dataclass
class Skill:
    """A loaded skill: front-matter fields, body and where it came from."""

    name: str
    description: str
    folder: Path
    """Absolute, symlink-resolved skill folder."""
    file: Path
    """Its SKILL.md."""
    source: Source
    body: str
    license: str | None = None
    compatibility: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    allowed_tools: list[str] = field(default_factory=list)
    """``allowed-tools`` entries (space-delimited in the spec; a YAML list is accepted too)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys from other clients (e.g. ``disable-model-invocation``), kept but unused."""
    warnings: list[str] = field(default_factory=list)

    def resources(self) -> list[str]:
        """Files of the folder other than SKILL.md (``scripts/``, ``references/``, ``assets/``
        and any other), relative with ``/``, sorted; at most ``MAX_RESOURCES``, hidden files
        and bulky folders skipped."""
        found: list[str] = []
        for here, dirs, files in os.walk(self.folder):
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_FOLDERS)
            rel_dir = Path(here).relative_to(self.folder)
            for name in sorted(files):
                if name.startswith(".") or (rel_dir == Path(".") and name == self.file.name):
                    continue
                found.append((rel_dir / name).as_posix())
                if len(found) >= MAX_RESOURCES:
                    return found
        return found


def load_skill(folder: Path, source: Source = "user") -> Skill:
    """Load the skill in ``folder`` leniently.

    Raises :class:`SkillLoadError` when the folder cannot be used (a symlink loop, not a
    folder), there is no SKILL.md, it is not a regular UTF-8 file of at most
    :data:`~skills.format.MAX_SKILL_FILE` bytes, its front matter is missing or unparsable, or
    it has no usable description."""
    folder = Path(folder).expanduser()
    # Before resolve(): on a symlink loop it raises RuntimeError, which no caller expects.
    if problem := folder_problem(folder):
        raise SkillLoadError(problem)
    folder = folder.resolve()
    file = find_skill_file(folder)
    if file is None:
        raise SkillLoadError(f"{folder} has no SKILL.md")
    try:
        raw = read_skill_file(file).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SkillLoadError(f"{file} is not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from exc
    except SkillFileError as exc:
        raise SkillLoadError(f"{file} {exc}") from exc
    try:
        parsed = parse_skill_text(raw)
    except FrontMatterError as exc:
        raise SkillLoadError(f"{file}: {exc}") from exc
    fields = parsed.fields
    description = fields.get("description")
    if not isinstance(description, str) or not description.strip():
        raise SkillLoadError(f"{file}: {_no_description(parsed.source)}")
    warnings: list[str] = []
    raw_name = fields.get("name")
    if isinstance(raw_name, str) and raw_name.strip():
        name = raw_name.strip()
        warnings += name_errors(raw_name, folder)
    else:
        name = folder.name
        warnings.append(f"no name in the front matter; using the folder name '{name}'")
    warnings += description_errors(description)
    metadata = fields.get("metadata")
    allowed = fields.get("allowed-tools")
    if isinstance(allowed, str):
        allowed_tools = allowed.split()
    elif isinstance(allowed, list):
        allowed_tools = [str(a) for a in allowed if isinstance(a, str)]
    else:
        allowed_tools = []
    license_ = fields.get("license")
    compatibility = fields.get("compatibility")
    return Skill(
        name=name, description=" ".join(description.split()), folder=folder, file=file,
        source=source, body=parsed.body,
        license=license_ if isinstance(license_, str) else None,
        compatibility=compatibility if isinstance(compatibility, str) else None,
        # Other clients nest mappings here (OpenClaw's JSON objects): kept as JSON text.
        metadata={str(k): v if isinstance(v, str) else json.dumps(v)
                  for k, v in metadata.items()} if isinstance(metadata, dict) else {},
        allowed_tools=allowed_tools,
        extra={k: v for k, v in fields.items() if k not in {
            "name", "description", "license", "compatibility", "metadata", "allowed-tools"}},
        warnings=warnings)


def _no_description(source: str) -> str:
    """Why the description is unusable, as ``agent skills validate`` words it: a description
    written with YAML the strict subset forbids (``&anchor [...]``, a ``!!python/...`` tag)
    reads as a list here, and "no description" would send the user looking for the wrong
    problem."""
    strict = strict_yaml_problems(source)
    if strict:
        return f"Invalid YAML in frontmatter: {strict[0]}"
    return "no description (the catalog needs one to say when to use the skill)"


def skill_folders(root: Path, max_depth: int = MAX_DEPTH) -> list[Path]:
    """Folders under ``root`` holding a SKILL.md, sorted; ``root`` itself counts when it is one.

    A skill's own folder is not searched further; hidden and bulky folders (``.git``,
    ``node_modules``) are skipped; at most ``max_depth`` levels and ``MAX_FOLDERS`` folders.
    A folder that cannot be listed (a symlink loop, no permission) is returned too, so that
    loading or validating it says why: dropped, it would vanish without a word, and before
    each entry was checked on its own one loop hid every skill beside it."""
    if not os.path.lexists(root):
        return []
    found: list[Path] = []
    queue: list[tuple[Path, int]] = [(root, 0)]
    visited = 0
    while queue and visited < MAX_FOLDERS:
        folder, depth = queue.pop(0)
        visited += 1
        if find_skill_file(folder) is not None:
            found.append(folder)
            continue
        if depth >= max_depth:
            continue
        try:
            with os.scandir(folder) as entries:
                children = sorted(e.path for e in entries
                                  if not e.name.startswith(".")
                                  and e.name not in SKIPPED_FOLDERS and _may_be_folder(e))
        except OSError:
            found.append(folder)
            continue
        queue += [(Path(c), depth + 1) for c in children]
    return sorted(found)


def _may_be_folder(entry: os.DirEntry[str]) -> bool:
    """Whether ``entry`` is a folder, or may be one but cannot be checked (a symlink loop):
    listing such an entry then fails and it is reported, where the error used to escape."""
    try:
        return entry.is_dir()
    except OSError:
        return True


@dataclass
class Discovery:
    """The skills found, by name, plus what was skipped or overridden."""

    skills: dict[str, Skill] = field(default_factory=dict)
    """Winning skill per name, sorted by name."""
    warnings: list[str] = field(default_factory=list)
    """Collisions (which skill overrode which)."""
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    """Folders that could not be loaded, with the reason."""


def skill_roots(repo: Path | None, home: Path | None = None) -> list[tuple[Source, Path]]:
    """Where skills are looked for, lowest precedence first: the bundled skills,
    ``~/.agents/skills``, ``<repo>/.agents/skills``."""
    roots: list[tuple[Source, Path]] = [("bundled", BUNDLED_DIR),
                                        ("user", (home or Path.home()) / ".agents" / "skills")]
    if repo is not None:
        roots.append(("project", Path(repo) / ".agents" / "skills"))
    return roots


def discover(roots: list[tuple[Source, Path]]) -> Discovery:
    """Load every skill under ``roots`` (lowest precedence first: a later root's skill
    overrides an earlier one's of the same name, with a warning)."""
    out = Discovery()
    for source, root in roots:
        for folder in skill_folders(root):
            try:
                skill = load_skill(folder, source)
            except SkillLoadError as exc:
                out.skipped.append((folder, str(exc)))
                continue
            previous = out.skills.get(skill.name)
            if previous is not None:
                if previous.source == source:
                    out.warnings.append(f"skill '{skill.name}' is defined twice in {root}: "
                                        f"{previous.folder} is used, {skill.folder} ignored")
                    continue
                out.warnings.append(f"{source} skill '{skill.name}' ({skill.folder}) overrides "
                                    f"the {previous.source} one ({previous.folder})")
            out.skills[skill.name] = skill
    out.skills = dict(sorted(out.skills.items()))
    return out
