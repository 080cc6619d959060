from pathlib import Path

import pytest

from agent.approvals import ApprovalUnavailable
from agent.sessions.approval import describe, make_approver, needs_approval
from agent.sessions.instructions import MAX_FILE_CHARS, load_instructions

BASH = {"name": "bash", "arguments": {"command": "rm -rf build"}}
EDIT = {"name": "str_replace", "arguments": {"path": "a.py", "old_str": "x = 1",
                                             "new_str": "x = 2"}}
VIEW = {"name": "view", "arguments": {"path": "."}}


def test_modes_decide_what_needs_approval():
    assert not needs_approval("full-auto", "bash")
    assert needs_approval("auto-edit", "bash") and not needs_approval("auto-edit", "create")
    assert needs_approval("ask", "create") and needs_approval("ask", "bash")
    assert not needs_approval("ask", "view")
    assert needs_approval("auto-edit", "some_mcp_tool")  # unknown tools are commands


def test_ask_shows_the_edit_as_a_diff_and_a_denial_carries_the_reason():
    prompts: list[str] = []
    approve = make_approver("ask", ask=lambda p: prompts.append(p) or "use sed instead",
                            interactive=True)
    assert approve(EDIT) == "use sed instead"
    assert "-x = 1" in prompts[0] and "+x = 2" in prompts[0]
    assert make_approver("ask", ask=lambda p: "y", interactive=True)(BASH) is None
    assert approve(VIEW) is None and len(prompts) == 1


def test_without_a_terminal_a_needed_approval_fails_fast():
    approve = make_approver("auto-edit", interactive=False)
    assert approve(EDIT) is None
    with pytest.raises(ApprovalUnavailable, match="stdin is not a terminal"):
        approve(BASH)
    assert make_approver("full-auto") is None


def test_describe_shows_the_command():
    assert describe(BASH) == "$ rm -rf build"


def test_agents_md_from_root_down_to_the_working_directory(tmp_path: Path):
    (tmp_path / "AGENTS.md").write_text("root rule")
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "AGENTS.md").write_text("pkg rule")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "AGENTS.md").write_text("not on the path")
    text = load_instructions(tmp_path, tmp_path / "pkg" / "sub")
    assert text.index("root rule") < text.index("pkg rule")
    assert "not on the path" not in text
    assert load_instructions(tmp_path / "other", tmp_path / "other") .endswith("not on the path")


def test_agents_md_is_size_capped(tmp_path: Path):
    (tmp_path / "AGENTS.md").write_text("x" * (MAX_FILE_CHARS * 3))
    text = load_instructions(tmp_path, tmp_path)
    assert len(text) < MAX_FILE_CHARS + 200 and "truncated" in text


def test_an_agents_md_linking_outside_the_repository_is_never_read(tmp_path: Path):
    """A cloned repository's AGENTS.md linking to ~/.ssh/id_rsa put that file into the model's
    prompt (the workspace tools refuse such links; this reader followed them). A link inside
    the repository still works, and a file larger than the cap is read only as far as used."""
    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY----- s3cr3t\n")
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "AGENTS.md").symlink_to(secret)
    text = load_instructions(repo, repo)
    assert "s3cr3t" not in text
    assert text == "[AGENTS.md skipped: it is not a file inside the repository]"
    (repo / "AGENTS.md").unlink()
    (repo / "docs" / "AGENTS.md").write_text("use tabs\n")
    (repo / "AGENTS.md").symlink_to(repo / "docs" / "AGENTS.md")
    assert load_instructions(repo, repo) == "## AGENTS.md\nuse tabs"
    (repo / "AGENTS.md").unlink()
    (repo / "AGENTS.md").write_text("x" * (MAX_FILE_CHARS * 10))
    text = load_instructions(repo, repo)
    assert text.endswith("[... truncated: AGENTS.md is longer]")
    assert len(text) < MAX_FILE_CHARS + 100
