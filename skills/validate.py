"""``agent skills validate``: the specification's rules, reported as the reference validator
``skills-ref`` reports them.

Errors use the reference's wording so that a skill passing here passes in every client that
validates with it; ``tests/test_skills_validate.py`` checks the two agree on every fixture.
Where the reference would crash (a file that is not UTF-8) this reports an error instead.
Warnings cover spec rules the reference does not check (types of ``metadata``, ``license``,
``allowed-tools``); they never make a skill invalid.
"""

from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from skills.format import (
    BOM,
    MAX_COMPATIBILITY,
    MAX_DESCRIPTION,
    MAX_NAME,
    SPEC_FIELDS,
    FrontMatterError,
    SkillFileError,
    find_skill_file,
    folder_problem,
    read_skill_file,
    split_front_matter,
    strict_yaml_problems,
)


@dataclass
class Report:
    """What :func:`validate` found in one skill folder."""

    folder: Path
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def valid(self) -> bool:
        """True when there is no error (warnings allowed)."""
        return not self.errors


def validate(path: Path) -> Report:
    """Check the skill folder ``path`` (or its ``SKILL.md``) against the specification.

    Never raises for a bad skill: every problem is an entry in the report."""
    path = Path(path).expanduser()
    if path.name.lower() == "skill.md" and os.path.isfile(path):
        path = path.parent
    problem = folder_problem(path)
    folder = path if problem else path.resolve()
    report = Report(folder)
    if problem:
        report.errors.append(problem)
        return report
    skill_file = find_skill_file(folder)
    if skill_file is None:
        report.errors.append("Missing required file: SKILL.md")
        return report
    try:
        text = read_skill_file(skill_file).decode("utf-8")
    except SkillFileError as exc:
        report.errors.append(f"{skill_file.name} {exc}")
        return report
    except UnicodeDecodeError as exc:
        report.errors.append(f"SKILL.md is not valid UTF-8 ({exc.reason} at byte {exc.start})")
        return report
    if text.startswith(BOM):
        report.errors.append("SKILL.md must start with YAML frontmatter (---): it starts with a "
                             "byte-order mark (BOM); save it as UTF-8 without BOM")
        return report
    try:
        source, _ = split_front_matter(text.replace("\r\n", "\n"))
        fields = yaml.load(source, Loader=yaml.BaseLoader)
    except FrontMatterError as exc:
        report.errors.append(str(exc))
        return report
    except yaml.YAMLError as exc:
        report.errors.append(f"Invalid YAML in frontmatter: {exc}".splitlines()[0])
        return report
    strict = strict_yaml_problems(source)
    if strict:
        # Like the reference, one parse error: the first.
        report.errors.append(f"Invalid YAML in frontmatter: {strict[0]}")
        return report
    if not isinstance(fields, dict):
        report.errors.append("SKILL.md frontmatter must be a YAML mapping")
        return report
    report.errors += field_errors(fields, folder)
    report.warnings += field_warnings(fields)
    return report


def field_errors(fields: dict[str, Any], folder: Path | None) -> list[str]:
    """The specification's rules on front-matter ``fields`` (``folder``: for the name match)."""
    errors = []
    extra = set(fields) - SPEC_FIELDS
    if extra:
        errors.append(f"Unexpected fields in frontmatter: {', '.join(sorted(extra))}. "
                      f"Only {sorted(SPEC_FIELDS)} are allowed.")
    if "name" not in fields:
        errors.append("Missing required field in frontmatter: name")
    else:
        errors += name_errors(fields["name"], folder)
    if "description" not in fields:
        errors.append("Missing required field in frontmatter: description")
    else:
        errors += description_errors(fields["description"])
    if "compatibility" in fields:
        value = fields["compatibility"]
        if not isinstance(value, str):
            errors.append("Field 'compatibility' must be a string")
        elif len(value) > MAX_COMPATIBILITY:
            errors.append(f"Compatibility exceeds {MAX_COMPATIBILITY} character limit "
                          f"({len(value)} chars)")
    return errors


def name_errors(value: Any, folder: Path | None) -> list[str]:
    """Rules on ``name``: 1-64 lowercase letters/digits and single hyphens, no hyphen at either
    end, equal to the folder name (compared after Unicode NFKC normalisation)."""
    if not isinstance(value, str) or not value.strip():
        return ["Field 'name' must be a non-empty string"]
    name = unicodedata.normalize("NFKC", value.strip())
    errors = []
    if len(name) > MAX_NAME:
        errors.append(f"Skill name '{name}' exceeds {MAX_NAME} character limit "
                      f"({len(name)} chars)")
    if name != name.lower():
        errors.append(f"Skill name '{name}' must be lowercase")
    if name.startswith("-") or name.endswith("-"):
        errors.append("Skill name cannot start or end with a hyphen")
    if "--" in name:
        errors.append("Skill name cannot contain consecutive hyphens")
    if not all(c.isalnum() or c == "-" for c in name):
        errors.append(f"Skill name '{name}' contains invalid characters. "
                      "Only letters, digits, and hyphens are allowed.")
    if folder is not None and unicodedata.normalize("NFKC", folder.name) != name:
        errors.append(f"Directory name '{folder.name}' must match skill name '{name}'")
    return errors


def description_errors(value: Any) -> list[str]:
    """Rules on ``description``: a non-empty string of at most 1024 characters."""
    if not isinstance(value, str) or not value.strip():
        return ["Field 'description' must be a non-empty string"]
    if len(value) > MAX_DESCRIPTION:
        return [f"Description exceeds {MAX_DESCRIPTION} character limit ({len(value)} chars)"]
    return []


def field_warnings(fields: dict[str, Any]) -> list[str]:
    """Spec rules the reference validator does not enforce."""
    warnings = []
    metadata = fields.get("metadata")
    if metadata is not None and not (isinstance(metadata, dict) and all(
            isinstance(v, str) for v in metadata.values())):
        warnings.append("Field 'metadata' should map string keys to string values")
    for key in ("license", "allowed-tools"):
        if key in fields and not isinstance(fields[key], str):
            warnings.append(f"Field '{key}' should be a string")
    return warnings
