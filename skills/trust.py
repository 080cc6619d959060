"""Whether a skill's ``allowed-tools`` may pre-approve anything.

A project skill (``<repo>/.agents/skills``) comes with the repository — a clone, a branch, a
pull request — so its ``allowed-tools`` would let text nobody reviewed approve commands (a
``Bash`` entry runs every command unasked under ``auto-edit`` once the model activates the
skill, and a prompt injection can ask it to). Its instructions load as usual; what it
pre-approves counts only after the user trusts the skill folder's exact contents once
(``agent skills trust NAME``), remembered as a sha256 per folder in
``<config>/skill-trust.json``, the way MCP project files are trusted
(:mod:`tools.mcp.config`). Any change to the folder (SKILL.md, a script an entry names) needs
trust again. Bundled and user skills (``~/.agents/skills``) are the user's own: trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from backend.home import home
from skills.format import SkillFileError, read_regular_file
from skills.loader import SKIPPED_FOLDERS, Skill

MAX_DIGEST_BYTES = 64 << 20
"""A folder holding more than this many bytes is never trusted (nothing to review by hand)."""


class SkillTrustError(ValueError):
    """The folder cannot be trusted (too large, unreadable); the message says why."""


def trust_file() -> Path:
    """Where trusted project skill folders are remembered: folder → sha256."""
    return home().config / "skill-trust.json"


def folder_digest(folder: Path) -> str:
    """sha256 (hex) over every file below ``folder``: relative path and bytes, in sorted order;
    a symbolic link (to a file or a folder) counts as its target's path (what it points to is
    not read).
    A FIFO or device is never trusted (it is not read: that could block or never end).
    Folders in :data:`~skills.loader.SKIPPED_FOLDERS` are left out. Raises
    :class:`SkillTrustError` past :data:`MAX_DIGEST_BYTES` or when a file cannot be read
    (no file is read past the bytes left of that budget)."""
    digest = hashlib.sha256()
    total = 0
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS)
        # os.walk lists a symlink to a folder among the folders and does not follow it: it
        # counted for nothing, so re-pointing it after `agent skills trust` kept the trust.
        linked = [d for d in dirs if Path(root, d).is_symlink()]
        for name in sorted(files + linked):
            path = Path(root, name)
            rel = path.relative_to(folder).as_posix()
            try:
                if path.is_symlink():
                    data = b"link:" + os.readlink(path).encode("utf-8", "surrogateescape")
                else:
                    # Regular files only, no more than the budget left: a FIFO in a project
                    # skill hung even `agent skills list` (it asks whether each is trusted).
                    data = read_regular_file(path, MAX_DIGEST_BYTES - total)
            except OSError as exc:
                raise SkillTrustError(f"{path} cannot be read: {exc.strerror}") from None
            except SkillFileError as exc:
                raise SkillTrustError(f"{path} {exc}") from None
            total += len(data)
            if total > MAX_DIGEST_BYTES:
                raise SkillTrustError(f"{folder} holds more than {MAX_DIGEST_BYTES >> 20} MiB")
            digest.update(rel.encode("utf-8", "surrogateescape") + b"\0")
            digest.update(len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()


def _trusted() -> dict[str, str]:
    try:
        data = json.loads(trust_file().read_text("utf-8"))
    except (OSError, ValueError):  # missing, unreadable or broken: nothing is trusted
        return {}
    return data if isinstance(data, dict) else {}


def is_trusted(skill: Skill) -> bool:
    """Whether ``skill``'s ``allowed-tools`` may pre-approve calls: always for bundled and user
    skills; for a project skill, when the user trusted exactly its folder's current
    contents."""
    if skill.source != "project":
        return True
    try:
        return _trusted().get(str(skill.folder)) == folder_digest(skill.folder)
    except SkillTrustError:
        return False


def trust(skill: Skill) -> None:
    """Remember ``skill``'s folder, as it is now, as trusted. Raises :class:`SkillTrustError`
    (see :func:`folder_digest`)."""
    data = _trusted()
    data[str(skill.folder)] = folder_digest(skill.folder)
    target = trust_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=2) + "\n", "utf-8")
