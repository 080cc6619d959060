"""The Agent Skills specification's rules one by one, and a differential test: our `validate`
agrees with the reference validator `skills-ref` on every fixture."""

from pathlib import Path

import pytest
import skills_ref

from skills.loader import SkillLoadError, load_skill
from skills.validate import validate

OK_DESC = "Formats release notes. Use when the user asks for a changelog."


def md(front: str, body: str = "# Steps\n\n1. Do it.\n") -> bytes:
    return f"---\n{front}---\n{body}".encode()


# name -> (folder name, SKILL.md bytes, substring of our first error, or None when valid)
FIXTURES: dict[str, tuple[str, bytes, str | None]] = {
    "minimal": ("notes", md(f"name: notes\ndescription: {OK_DESC}\n"), None),
    "all-fields": ("notes", md(f"name: notes\ndescription: {OK_DESC}\nlicense: MIT\n"
                               "compatibility: Needs git and python3\nmetadata:\n  author: me\n"
                               "  version: '1.0'\nallowed-tools: Bash(git:*) Read\n"), None),
    "digits-and-hyphens": ("a1-b2-c3", md(f"name: a1-b2-c3\ndescription: {OK_DESC}\n"), None),
    "name-64": ("a" * 64, md(f"name: {'a' * 64}\ndescription: {OK_DESC}\n"), None),
    "name-65": ("a" * 65, md(f"name: {'a' * 65}\ndescription: {OK_DESC}\n"),
                "exceeds 64 character limit"),
    "uppercase": ("Notes", md(f"name: Notes\ndescription: {OK_DESC}\n"), "must be lowercase"),
    "leading-hyphen": ("-notes", md(f"name: -notes\ndescription: {OK_DESC}\n"),
                       "cannot start or end with a hyphen"),
    "trailing-hyphen": ("notes-", md(f"name: notes-\ndescription: {OK_DESC}\n"),
                        "cannot start or end with a hyphen"),
    "double-hyphen": ("re--notes", md(f"name: re--notes\ndescription: {OK_DESC}\n"),
                      "consecutive hyphens"),
    "underscore": ("re_notes", md(f"name: re_notes\ndescription: {OK_DESC}\n"),
                   "invalid characters"),
    "space": ("re notes", md(f"name: re notes\ndescription: {OK_DESC}\n"), "invalid characters"),
    "unicode-lowercase": ("café", md(f"name: café\ndescription: {OK_DESC}\n"), None),
    "empty-name": ("notes", md(f"name: ''\ndescription: {OK_DESC}\n"), "non-empty string"),
    "name-mismatch": ("other", md(f"name: notes\ndescription: {OK_DESC}\n"),
                      "Directory name 'other' must match skill name 'notes'"),
    "missing-name": ("notes", md(f"description: {OK_DESC}\n"),
                     "Missing required field in frontmatter: name"),
    "missing-description": ("notes", md("name: notes\n"),
                            "Missing required field in frontmatter: description"),
    "empty-description": ("notes", md("name: notes\ndescription: '   '\n"),
                          "'description' must be a non-empty string"),
    "description-1024": ("notes", md(f"name: notes\ndescription: {'d' * 1024}\n"), None),
    "description-1025": ("notes", md(f"name: notes\ndescription: {'d' * 1025}\n"),
                         "Description exceeds 1024 character limit (1025 chars)"),
    "compatibility-500": ("notes", md(f"name: notes\ndescription: {OK_DESC}\n"
                                      f"compatibility: {'c' * 500}\n"), None),
    "compatibility-501": ("notes", md(f"name: notes\ndescription: {OK_DESC}\n"
                                      f"compatibility: {'c' * 501}\n"),
                          "Compatibility exceeds 500 character limit"),
    "compatibility-mapping": ("notes", md(f"name: notes\ndescription: {OK_DESC}\n"
                                          "compatibility:\n  os: linux\n"),
                              "'compatibility' must be a string"),
    "unknown-keys": ("notes", md(f"name: notes\ndescription: {OK_DESC}\n"
                                 "disable-model-invocation: true\nversion: 2\n"),
                     "Unexpected fields in frontmatter: disable-model-invocation, version"),
    "no-front-matter": ("notes", b"# Notes\n\nJust text.\n", "must start with YAML frontmatter"),
    "unclosed": ("notes", b"---\nname: notes\ndescription: x\n", "not properly closed"),
    "bad-yaml": ("notes", md("name: notes\ndescription: use it when: asked\n"),
                 "Invalid YAML in frontmatter"),
    "bad-indent": ("notes", md("name: notes\n  description: x\n"), "Invalid YAML"),
    "not-a-mapping": ("notes", md("- name\n- description\n"), "must be a YAML mapping"),
    "empty-front-matter": ("notes", md(""), "must be a YAML mapping"),
    "flow-mapping": ("notes", md(f"name: notes\ndescription: {OK_DESC}\n"
                                 'metadata: {"a": "b"}\n'), "flow-style mappings"),
    "flow-sequence": ("notes", md(f"name: notes\ndescription: {OK_DESC}\n"
                                  "allowed-tools: [Read, Bash]\n"), "flow-style sequences"),
    "duplicate-key": ("notes", md(f"name: notes\nname: notes\ndescription: {OK_DESC}\n"),
                      "duplicate key 'name'"),
    "anchor-alias": ("notes", md("name: &n notes\ndescription: *n\n"), "anchors"),
    "tag": ("notes", md(f"name: !!str notes\ndescription: {OK_DESC}\n"), "tags"),
    "crlf": ("notes", md(f"name: notes\ndescription: {OK_DESC}\n").replace(b"\n", b"\r\n"),
             None),
    "bom": ("notes", b"\xef\xbb\xbf" + md(f"name: notes\ndescription: {OK_DESC}\n"),
            "byte-order mark"),
    "folded-description": ("notes", md("name: notes\ndescription: >\n  Formats notes.\n"
                                       "  Use for changelogs.\n"), None),
    "quoted-colon": ("notes", md('name: notes\ndescription: "Use when: asked"\n'), None),
    "number-like-name": ("123", md(f"name: 123\ndescription: {OK_DESC}\n"), None),
    "lowercase-file": ("notes", md(f"name: notes\ndescription: {OK_DESC}\n"), None),
}


def make(tmp_path: Path, key: str) -> Path:
    folder_name, data, _ = FIXTURES[key]
    folder = tmp_path / key / folder_name
    folder.mkdir(parents=True)
    (folder / ("skill.md" if key == "lowercase-file" else "SKILL.md")).write_bytes(data)
    return folder


@pytest.mark.parametrize("key", sorted(FIXTURES))
def test_validate_applies_each_rule_of_the_spec(tmp_path: Path, key: str):
    expected = FIXTURES[key][2]
    report = validate(make(tmp_path, key))
    if expected is None:
        assert report.errors == []
    else:
        assert report.errors and expected in report.errors[0], report.errors


@pytest.mark.parametrize("key", sorted(FIXTURES))
def test_validate_agrees_with_the_reference_validator(tmp_path: Path, key: str):
    folder = make(tmp_path, key)
    ours = validate(folder).errors
    theirs = skills_ref.validate(folder)
    assert bool(ours) == bool(theirs), (ours, theirs)
    parse_error = any(t.startswith(("Invalid YAML", "SKILL.md")) for t in theirs)
    if not parse_error:
        # Same rules, same words: a skill fixed by one validator's message passes the other.
        assert sorted(ours) == sorted(theirs)


def test_validate_reports_a_file_that_is_not_utf8(tmp_path: Path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "SKILL.md").write_bytes(md("name: notes\ndescription: caf\xe9\n")
                                      .replace(b"\xc3\xa9", b"\xe9"))
    assert "not valid UTF-8" in validate(folder).errors[0]
    with pytest.raises(SkillLoadError, match="not UTF-8"):
        load_skill(folder)


def test_validate_reports_missing_paths_and_files(tmp_path: Path):
    assert validate(tmp_path / "nope").errors == [f"Path does not exist: {tmp_path / 'nope'}"]
    (tmp_path / "empty").mkdir()
    assert validate(tmp_path / "empty").errors == ["Missing required file: SKILL.md"]
    (tmp_path / "file.txt").write_text("x")
    assert validate(tmp_path / "file.txt").errors[0].startswith("Not a directory")


def test_validate_warns_about_field_types_the_reference_does_not_check(tmp_path: Path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "SKILL.md").write_bytes(md(f"name: notes\ndescription: {OK_DESC}\nmetadata:\n"
                                         "  nested:\n    a: b\nallowed-tools:\n  - Read\n"))
    report = validate(folder)
    assert report.valid and skills_ref.validate(folder) == []
    assert report.warnings == ["Field 'metadata' should map string keys to string values",
                               "Field 'allowed-tools' should be a string"]


@pytest.mark.parametrize("key", ["crlf", "bom", "unknown-keys", "name-mismatch", "uppercase",
                                 "description-1025", "flow-mapping", "missing-name"])
def test_the_loader_is_lenient_where_a_skill_is_still_usable(tmp_path: Path, key: str):
    skill = load_skill(make(tmp_path, key))
    assert skill.description and skill.body.startswith("# Steps")
    if key in {"name-mismatch", "uppercase", "description-1025", "missing-name"}:
        assert skill.warnings, key
    if key == "unknown-keys":
        assert skill.extra == {"disable-model-invocation": "true", "version": "2"}
        assert skill.warnings == []


@pytest.mark.parametrize("key", ["no-front-matter", "unclosed", "bad-yaml", "not-a-mapping",
                                 "missing-description", "empty-description"])
def test_the_loader_skips_an_unusable_skill_with_the_reason(tmp_path: Path, key: str):
    with pytest.raises(SkillLoadError) as info:
        load_skill(make(tmp_path, key))
    assert "SKILL.md" in str(info.value)
