"""``agent skills new``: a new skill folder that passes validation as written."""

from __future__ import annotations

import json
from pathlib import Path

from skills.validate import name_errors, validate

TEMPLATE = """---
name: {name}
description: {description}
---

# {title}

Use this skill when: (say which tasks it is for; the description above is what the agent sees
before activating it, so keep it specific).

## Steps

1. (First concrete step: a command to run or a file to read.)
2. (Next step.)
3. Check the result (run the tests) before saying the task is done.

Put long reference material in `references/` and helper programs in `scripts/`; mention them
here by relative path (for example `scripts/check.py`) so the agent knows when to use them.
"""


class ScaffoldError(ValueError):
    """The skill cannot be created (invalid name, folder exists); the message says why."""


def new_skill(name: str, parent: Path, description: str | None = None) -> Path:
    """Create ``parent/name/SKILL.md`` from the template and return the folder.

    Raises :class:`ScaffoldError` when ``name`` breaks the naming rules, the folder already
    exists, or the written skill does not validate (a description over the limit)."""
    problems = name_errors(name, None)
    if problems:
        raise ScaffoldError("; ".join(problems))
    folder = Path(parent).expanduser() / name
    if folder.exists():
        raise ScaffoldError(f"{folder} already exists; choose another name or remove it")
    text = (description or f"Describe what {name} does and when to use it.").strip()
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(TEMPLATE.format(
        # A JSON string is a valid YAML double-quoted scalar: colons and '#' stay text.
        name=name, description=json.dumps(" ".join(text.split()), ensure_ascii=False),
        title=name.replace("-", " ").capitalize()), "utf-8")
    report = validate(folder)
    if not report.valid:
        (folder / "SKILL.md").unlink()
        folder.rmdir()
        raise ScaffoldError("; ".join(report.errors))
    return folder
