"""Trust of a repository's own skills (skills/trust.py): what the digest covers, a broken trust
file, and `agent skills trust` on names it cannot trust."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from skills.loader import load_skill
from skills.trust import (
    MAX_DIGEST_BYTES,
    SkillTrustError,
    folder_digest,
    is_trusted,
    trust,
    trust_file,
)
from tests.test_cli_ux import agent


def _skill(folder: Path, allowed: str = "Bash") -> Path:
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {folder.name}\ndescription: Does x.\n"
                                     f"allowed-tools: {allowed}\n---\nbody\n")
    return folder


def test_the_digest_covers_every_file_and_a_link_by_where_it_points(tmp_path: Path):
    folder = _skill(tmp_path / "s")
    outside = tmp_path / "outside.sh"
    outside.write_text("echo one\n")
    os.symlink(outside, folder / "run.sh")
    first = folder_digest(folder)
    outside.write_text("echo two\n")  # not read through the link
    assert folder_digest(folder) == first
    (folder / "notes.md").write_text("x")
    assert folder_digest(folder) != first


def test_a_link_to_a_folder_counts_by_where_it_points(tmp_path: Path):
    """A symlink to a folder inside a skill counted for nothing: re-pointing `scripts` at
    other scripts after `agent skills trust` kept the skill trusted."""
    folder = _skill(tmp_path / "s")
    for name in ("good", "evil"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.sh").write_text(f"echo {name}\n")
    os.symlink(tmp_path / "good", folder / "scripts")
    first = folder_digest(folder)
    (folder / "scripts").unlink()
    os.symlink(tmp_path / "evil", folder / "scripts")
    assert folder_digest(folder) != first


def test_a_project_skill_is_trusted_as_it_was_and_a_broken_trust_file_trusts_nothing(
        tmp_path: Path, agent_home: Path):
    folder = _skill(tmp_path / "repo" / ".agents" / "skills" / "s")
    skill = load_skill(folder, "project")
    assert not is_trusted(skill)
    trust(skill)
    assert is_trusted(skill)
    assert is_trusted(load_skill(folder, "user"))  # the user's own skills always count
    trust_file().write_bytes(b"\xff{not json")
    assert not is_trusted(skill)
    trust(skill)  # a broken file is replaced, not a crash
    (folder / "SKILL.md").write_text((folder / "SKILL.md").read_text() + "more\n")
    assert not is_trusted(skill)


def test_a_folder_too_big_to_review_is_never_trusted(tmp_path: Path, agent_home: Path,
                                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("skills.trust.MAX_DIGEST_BYTES", 100)
    folder = _skill(tmp_path / "s")
    (folder / "blob.bin").write_bytes(b"x" * 200)
    with pytest.raises(SkillTrustError, match="more than"):
        folder_digest(folder)
    assert MAX_DIGEST_BYTES > 100 and not is_trusted(load_skill(folder, "project"))


def test_agent_skills_trust_refuses_what_it_cannot_trust(tmp_path: Path, agent_home: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    unknown = agent("skills", "trust", "nope", "--repo", str(repo), home=agent_home, cwd=repo)
    assert unknown.returncode == 2 and "no skill named 'nope'" in unknown.stderr
    bundled = agent("skills", "trust", "python-project", "--repo", str(repo), home=agent_home,
                    cwd=repo)
    assert bundled.returncode == 0 and "already count" in bundled.stdout
