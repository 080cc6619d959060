"""Skill folders a cloned repository controls: symlink loops, a SKILL.md that is a folder, a
FIFO, a device or huge, front matter outside the strict YAML subset. Each is skipped by name
with the reason `agent skills validate` gives, and never hides, hangs or drops another skill."""

import os
from pathlib import Path

import pytest

from skills.format import MAX_SKILL_FILE
from skills.loader import discover, skill_folders
from skills.validate import validate
from tests.test_skills_discovery import agent_cli, write_skill


def test_a_symlink_loop_is_skipped_by_name_and_hides_no_other_skill(tmp_path: Path):
    """Field trial: one `ln -s loop2 .agents/skills/loop2` made every project skill vanish
    (the loop's error dropped the whole listing) and validate called it missing."""
    home, repo = tmp_path / "home", tmp_path / "repo"
    root = repo / ".agents" / "skills"
    write_skill(root, "s", "d")
    (root / "loop2").symlink_to("loop2")
    write_skill(root / "group", "deep")
    (root / "group" / "ring").symlink_to("ring")
    found = discover([("project", root)])
    assert list(found.skills) == ["deep", "s"]
    assert [(p.name, r) for p, r in found.skipped] == [
        ("ring", f"Path is a symlink loop: {root / 'group' / 'ring'}"),
        ("loop2", f"Path is a symlink loop: {root / 'loop2'}")]
    assert validate(root / "loop2").errors == [f"Path is a symlink loop: {root / 'loop2'}"]

    listed = agent_cli("list", home=home, cwd=repo)
    assert listed.returncode == 0, listed.stderr
    assert "project  s " in listed.stdout
    assert f"skipped  {root / 'loop2'}: Path is a symlink loop" in listed.stdout
    many = agent_cli("validate", ".agents/skills", home=home, cwd=repo)
    assert many.returncode == 1, many.stderr
    assert f"valid: {(root / 's').resolve()}" in many.stdout
    assert "error: Path is a symlink loop: .agents/skills/loop2" in many.stdout
    one = agent_cli("validate", ".agents/skills/loop2", home=home, cwd=repo)
    assert one.returncode == 1 and "symlink loop" in one.stdout and "exist" not in one.stdout


def test_a_link_to_nothing_as_the_folder_is_named_as_such(tmp_path: Path):
    (tmp_path / "gone").symlink_to("vendor/skill")
    assert validate(tmp_path / "gone").errors == [
        f"Path is a symlink to nothing: {tmp_path / 'gone'} -> vendor/skill"]


def _folder(skill_file: Path) -> None:
    skill_file.mkdir()


def _fifo(skill_file: Path) -> None:
    os.mkfifo(skill_file)


def _dev_zero(skill_file: Path) -> None:
    skill_file.symlink_to("/dev/zero")


def _loop(skill_file: Path) -> None:
    skill_file.symlink_to(skill_file.name)


def _dangling(skill_file: Path) -> None:
    skill_file.symlink_to("nowhere.md")


def _huge(skill_file: Path) -> None:
    with skill_file.open("wb") as out:
        out.write(b"---\nname: odd\ndescription: d\n---\n")
        out.truncate(MAX_SKILL_FILE + 1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("make", "reason"), [
    (_folder, "is a folder, not a regular file"),
    (_fifo, "is a FIFO, not a regular file"),
    (_dev_zero, "is a device, not a regular file"),
    (_loop, "is a symlink loop"),
    (_dangling, "is a symlink to nothing (nowhere.md)"),
    (_huge, "is larger than 1 MiB"),
], ids=["folder", "fifo", "dev-zero", "loop", "dangling", "huge"])
def test_a_skill_file_that_is_not_a_readable_regular_file_is_skipped_with_the_reason(
        tmp_path: Path, make, reason: str):
    """A FIFO would block the read forever and /dev/zero never end it; a folder or a broken
    link named SKILL.md used to make the skill vanish from `skills list` without a word."""
    root = tmp_path / "skills"
    write_skill(root, "good")
    folder = root / "odd"
    folder.mkdir()
    make(folder / "SKILL.md")
    assert [p.name for p in skill_folders(root)] == ["good", "odd"]
    found = discover([("user", root)])
    assert list(found.skills) == ["good"]
    assert found.skipped == [(folder, f"{folder.resolve() / 'SKILL.md'} {reason}")]
    assert validate(folder).errors == [f"SKILL.md {reason}"]


@pytest.mark.parametrize(("front", "reason"), [
    ("description: &a [one, two]\n", "anchors (&name) are not allowed (line 3)"),
    ("description: !!python/object/apply:os.system [ls]\n", "tags (!tag) are not allowed "
     "(line 3)"),
], ids=["anchor-list", "python-tag"])
def test_list_gives_validate_s_reason_for_a_description_outside_strict_yaml(
        tmp_path: Path, front: str, reason: str):
    """`skills list` said "no description" where validate named the YAML feature at fault."""
    folder = tmp_path / "skills" / "odd"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: odd\n{front}---\nBody.\n")
    [(_, listed)] = discover([("user", tmp_path / "skills")]).skipped
    [validated] = validate(folder).errors
    assert validated == f"Invalid YAML in frontmatter: {reason}"
    assert listed == f"{folder / 'SKILL.md'}: {validated}"


@pytest.mark.timeout(60)
def test_a_fifo_in_a_project_skill_is_never_trusted_and_blocks_nothing(tmp_path: Path,
                                                                        agent_home: Path):
    """`skills list` asks whether each project skill is trusted, which hashes its folder: a
    FIFO there blocked the read, and the listing, forever."""
    from skills.loader import load_skill
    from skills.trust import SkillTrustError, folder_digest, is_trusted, trust

    folder = write_skill(tmp_path / "repo" / ".agents" / "skills", "s",
                         extra="allowed-tools: Bash\n")
    os.mkfifo(folder / "pipe")
    skill = load_skill(folder, "project")
    with pytest.raises(SkillTrustError, match="pipe is a FIFO, not a regular file"):
        folder_digest(folder)
    with pytest.raises(SkillTrustError):
        trust(skill)
    assert not is_trusted(skill)


def test_validate_of_a_path_it_may_not_stat_is_a_clear_error(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    """As a user other than root, a path under a folder without search permission made
    Python 3.11's Path.is_file raise PermissionError: an internal error (exit 4)."""
    from agent.cli.skills import validate_cmd
    from agent.errors import UserError

    locked = tmp_path / "locked" / "skill"
    real_stat = Path.stat

    def stat(self: Path, *args, **kwargs):
        if self == locked or locked in self.parents:
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *args, **kwargs)

    monkeypatch.setattr(Path, "stat", stat)
    with pytest.raises(UserError, match=r"locked/skill: cannot be read \(Permission denied\)"):
        validate_cmd(locked, repo=tmp_path)
