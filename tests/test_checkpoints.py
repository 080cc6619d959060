import os
import stat
import subprocess
from pathlib import Path

import git
import pytest

from agent.sessions.checkpoints.commits import commit_task
from agent.sessions.checkpoints.diffs import diff
from agent.sessions.checkpoints.plumbing import RepoStateError, checkpoint_ref, open_repo
from agent.sessions.checkpoints.restores import RestoreConflict, plan_restore, restore
from agent.sessions.checkpoints.snapshots import snapshot
from agent.sessions.checkpoints.tree import changed_paths


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No global or system git config, no identity from the environment, no editor."""
    fake_home = tmp_path / "home"
    fake_home.mkdir()
    monkeypatch.setenv("HOME", str(fake_home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(fake_home / "gitconfig"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_EDITOR", "true")
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME",
                "GIT_COMMITTER_EMAIL", "EMAIL", "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var, raising=False)


def run(cwd: Path, *args: str, check: bool = True) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc.stdout


def new_repo(path: Path, identity: bool = True, commit: bool = True) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    run(path, "init", "-q", "-b", "main")
    if identity:
        run(path, "config", "user.name", "Ada User")
        run(path, "config", "user.email", "ada@example.com")
    if commit:
        (path / "README.md").write_text("# readme\n")
        run(path, "add", "README.md")
        run(path, "commit", "-q", "-m", "initial")
    return path


def user_state(path: Path) -> dict[str, str]:
    """Everything git-visible the user could notice, as text."""
    return {
        "head": run(path, "rev-parse", "-q", "--verify", "HEAD", check=False),
        "branch": run(path, "symbolic-ref", "-q", "HEAD", check=False),
        "status": run(path, "status", "--porcelain", "--ignored", "-uall"),
        "staged": run(path, "diff", "--cached"),
        "index": run(path, "ls-files", "-s"),
        "stash": run(path, "stash", "list"),
        "stash_ref": run(path, "rev-parse", "-q", "--verify", "refs/stash", check=False),
    }


def files_on_disk(path: Path) -> dict[str, tuple[bytes, int]]:
    """Every file outside .git: content (or link target) and permission bits."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            full = Path(dirpath, name)
            rel = full.relative_to(path).as_posix()
            if full.is_symlink():
                found[rel] = (os.readlink(full).encode(), 0o120000)
            else:
                found[rel] = (full.read_bytes(), stat.S_IMODE(full.stat().st_mode))
    return found


def tree_files(path: Path, commit: str) -> dict[str, str]:
    """``{path: mode}`` of a commit's tree."""
    out = run(path, "ls-tree", "-r", "-z", commit)
    return {item.split("\t", 1)[1]: item.split()[0] for item in out.split("\0") if item}


def blob(path: Path, commit: str, name: str) -> str:
    return run(path, "show", f"{commit}:{name}")


def messy_repo(tmp_path: Path) -> Path:
    """A repo with every kind of change: staged, unstaged, both, staged new, untracked,
    ignored, unstaged deletion, an executable and a symbolic link."""
    path = new_repo(tmp_path / "repo")
    (path / ".gitignore").write_text("*.log\nbuild/\n")
    (path / "staged.py").write_text("staged = 0\n")
    (path / "unstaged.py").write_text("unstaged = 0\n")
    (path / "both.py").write_text("both = 0\n")
    (path / "doomed.py").write_text("doomed = 0\n")
    (path / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (path / "run.sh").chmod(0o755)
    (path / "pkg").mkdir()
    (path / "pkg" / "mod.py").write_text("mod = 0\n")
    os.symlink("pkg/mod.py", path / "link.py")
    (path / "forced.log").write_text("tracked although ignored\n")
    (path / "odd name ü.txt").write_text("odd = 0\n")
    run(path, "add", "-A")
    run(path, "add", "-f", "forced.log")
    run(path, "commit", "-q", "-m", "project")
    (path / "forced.log").write_text("tracked although ignored, edited\n")
    (path / "staged.py").write_text("staged = 1\n")
    run(path, "add", "staged.py")
    (path / "unstaged.py").write_text("unstaged = 1\n")
    (path / "both.py").write_text("both = 1\n")
    run(path, "add", "both.py")
    (path / "both.py").write_text("both = 2\n")
    (path / "new_staged.py").write_text("new = 1\n")
    run(path, "add", "new_staged.py")
    (path / "notes.txt").write_text("untracked notes\n")
    (path / "debug.log").write_text("ignored log\n")
    (path / "build").mkdir()
    (path / "build" / "out.bin").write_bytes(b"\x00ignored\x01")
    (path / "doomed.py").unlink()
    return path


def agent_edits(path: Path) -> None:
    """What a task might do: modify, create (also in new folders), delete, chmod, relink."""
    (path / "staged.py").write_text("staged = 'agent'\n")
    (path / "unstaged.py").write_text("unstaged = 'agent'\n")
    (path / "both.py").unlink()
    (path / "notes.txt").write_text("agent rewrote the notes\n")
    (path / "new_staged.py").unlink()
    (path / "pkg" / "mod.py").write_text("mod = 'agent'\n")
    (path / "pkg" / "added.py").write_text("added = 1\n")
    (path / "src" / "deep").mkdir(parents=True)
    (path / "src" / "deep" / "new.py").write_text("new = 1\n")
    (path / "run.sh").chmod(0o644)
    (path / "README.md").chmod(0o755)
    (path / "link.py").unlink()
    os.symlink("staged.py", path / "link.py")
    (path / "forced.log").write_text("agent\n")
    (path / "odd name ü.txt").write_text("odd = 'agent'\n")
    (path / "*.py").write_text("a file named like a glob\n")


def test_checkpoint_refs_are_private_and_bad_pieces_are_rejected():
    assert checkpoint_ref("20260101-000000-abc123", 3) == (
        "refs/agent/checkpoints/20260101-000000-abc123/3")
    assert checkpoint_ref("s1", 0, "after") == "refs/agent/checkpoints/s1/0-after"
    for bad in ("", "a/b", "a..b", "x.lock", ".hidden", "sp ace", "a~1"):
        with pytest.raises(ValueError):
            checkpoint_ref(bad, 1)
    with pytest.raises(ValueError):
        checkpoint_ref("s1", -1)


def test_a_snapshot_changes_nothing_the_user_can_see_and_leaves_ignored_files_out(
        tmp_path: Path):
    path = messy_repo(tmp_path)
    run(path, "status")  # let git refresh the index before taking the reference copy
    state, disk = user_state(path), files_on_disk(path)
    raw_index = (path / ".git" / "index").read_bytes()
    git_dir_entries = sorted(p.name for p in (path / ".git").iterdir())
    head = run(path, "rev-parse", "HEAD").strip()

    sha = snapshot(git.Repo(path), "refs/agent/checkpoints/s/1", "before task 1")

    assert (path / ".git" / "index").read_bytes() == raw_index
    assert sorted(p.name for p in (path / ".git").iterdir()) == git_dir_entries  # temp removed
    assert user_state(path) == state
    assert files_on_disk(path) == disk
    assert run(path, "rev-parse", "refs/agent/checkpoints/s/1").strip() == sha
    assert run(path, "rev-parse", f"{sha}^").strip() == head
    assert run(path, "log", "-1", "--format=%an <%ae>|%s", sha).strip() == (
        "dflash-agent <dflash-agent@localhost>|before task 1")
    assert tree_files(path, sha) == {
        ".gitignore": "100644", "README.md": "100644", "both.py": "100644",
        "forced.log": "100644", "link.py": "120000", "new_staged.py": "100644",
        "notes.txt": "100644", "odd name ü.txt": "100644", "pkg/mod.py": "100644",
        "run.sh": "100755", "staged.py": "100644", "unstaged.py": "100644",
    }
    assert blob(path, sha, "forced.log") == "tracked although ignored, edited\n"
    assert blob(path, sha, "both.py") == "both = 2\n"  # the working tree, not the index
    assert blob(path, sha, "unstaged.py") == "unstaged = 1\n"
    assert blob(path, sha, "notes.txt") == "untracked notes\n"


def test_restore_brings_back_every_file_and_mode_and_removes_what_the_agent_created(
        tmp_path: Path):
    path = messy_repo(tmp_path)
    repo = git.Repo(path)
    state, disk = user_state(path), files_on_disk(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    agent_edits(path)
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")
    index_mid = run(path, "ls-files", "-s")
    expected = ["*.py", "README.md", "both.py", "forced.log", "link.py", "new_staged.py",
                "notes.txt", "odd name ü.txt", "pkg/added.py", "pkg/mod.py", "run.sh",
                "src/deep/new.py", "staged.py", "unstaged.py"]
    assert changed_paths(repo, before, after) == expected

    plan = restore(repo, before, after, checkpoint_ref("s", 1, "undo"))

    assert plan.changed == expected and plan.conflicts == []
    assert files_on_disk(path) == disk
    assert not (path / "src").exists()
    assert (path / "pkg").is_dir()
    assert (path / "debug.log").read_text() == "ignored log\n"
    assert run(path, "ls-files", "-s") == index_mid == state["index"]
    assert user_state(path) == state


def test_restore_turns_a_folder_back_into_a_file_and_a_file_back_into_a_folder(tmp_path: Path):
    path = new_repo(tmp_path / "repo")
    (path / "config").write_text("a file\n")
    (path / "lib").mkdir()
    (path / "lib" / "util.py").write_text("util = 0\n")
    repo = git.Repo(path)
    disk = files_on_disk(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / "config").unlink()
    (path / "config" / "sub").mkdir(parents=True)
    (path / "config" / "sub" / "a.toml").write_text("x = 1\n")
    (path / "lib" / "util.py").unlink()
    (path / "lib").rmdir()
    (path / "lib").write_text("now a file\n")
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")

    plan = restore(repo, before, after, checkpoint_ref("s", 1, "undo"))

    assert plan.changed == ["config", "config/sub/a.toml", "lib", "lib/util.py"]
    assert files_on_disk(path) == disk


def test_restore_turns_a_link_the_task_put_in_a_folders_place_back_into_the_folder(
        tmp_path: Path):
    """A field trial: the task replaced lib/ by a symbolic link to a folder outside the
    repository, and the undo refused ("a folder on its path is a symbolic link"), though the
    link was the task's own and is removed first. The folder outside stays untouched."""
    path = new_repo(tmp_path / "repo")
    (path / "lib").mkdir()
    (path / "lib" / "util.py").write_text("util = 0\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "util.py").write_text("not the repository's\n")
    repo = git.Repo(path)
    disk = files_on_disk(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / "lib" / "util.py").unlink()
    (path / "lib").rmdir()
    (path / "lib").symlink_to(outside)
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")

    plan = restore(repo, before, after, checkpoint_ref("s", 1, "undo"))

    assert plan.changed == ["lib", "lib/util.py"] and plan.removed == ["lib"]
    assert files_on_disk(path) == disk and not (path / "lib").is_symlink()
    assert (outside / "util.py").read_text() == "not the repository's\n"


def test_restore_refuses_to_write_through_a_link_it_does_not_remove(tmp_path: Path):
    """After the task, the user put a link to a folder outside in lib/'s place: writing
    lib/util.py back would write outside the repository."""
    path = new_repo(tmp_path / "repo")
    (path / "lib").mkdir()
    (path / "lib" / "util.py").write_text("util = 0\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / "lib" / "util.py").write_text("util = 1\n")
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")
    (path / "lib" / "util.py").rename(outside / "util.py")
    (path / "lib").rmdir()
    (path / "lib").symlink_to(outside)

    with pytest.raises(RepoStateError, match="cannot restore lib/util.py: a folder on its "
                                             "path is a symbolic link"):
        restore(repo, before, after, checkpoint_ref("s", 1, "undo"), force=True)
    assert (outside / "util.py").read_text() == "util = 1\n"


def test_restore_refuses_to_replace_a_folder_holding_files_the_task_did_not_create(
        tmp_path: Path):
    path = new_repo(tmp_path / "repo")
    (path / ".gitignore").write_text("*.log\n")
    (path / "out").write_text("a file\n")
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / "out").unlink()
    (path / "out").mkdir()
    (path / "out" / "made.txt").write_text("by the agent\n")
    (path / "out" / "user.log").write_text("ignored, not the agent's\n")
    disk = files_on_disk(path)

    with pytest.raises(RepoStateError, match="cannot restore out: a folder"):
        restore(repo, before, None, checkpoint_ref("s", 1, "undo"))
    assert files_on_disk(path) == disk


def test_restore_writes_files_back_through_the_repos_line_ending_rules(tmp_path: Path):
    path = new_repo(tmp_path / "repo")
    (path / ".gitattributes").write_text("*.txt text eol=crlf\n")
    (path / "win.txt").write_bytes(b"one\r\ntwo\r\n")
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    assert run(path, "cat-file", "blob", f"{before}:win.txt") == "one\ntwo\n"  # normalized
    (path / "win.txt").write_bytes(b"agent\r\n")

    restore(repo, before, None, checkpoint_ref("s", 1, "undo"))

    assert (path / "win.txt").read_bytes() == b"one\r\ntwo\r\n"


def test_snapshot_and_restore_work_on_a_detached_head(tmp_path: Path):
    path = new_repo(tmp_path / "repo")
    (path / "a.py").write_text("a = 1\n")
    run(path, "add", "a.py")
    run(path, "commit", "-q", "-m", "second")
    run(path, "checkout", "-q", "--detach", "HEAD~1")
    (path / "a.py").write_text("a = 'untracked here'\n")
    repo = git.Repo(path)
    state = user_state(path)
    assert state["branch"] == ""

    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    assert run(path, "rev-parse", f"{before}^").strip() == state["head"].strip()
    (path / "a.py").write_text("a = 'agent'\n")
    (path / "README.md").write_text("# agent\n")
    restore(repo, before, None, checkpoint_ref("s", 1, "undo"))

    assert (path / "a.py").read_text() == "a = 'untracked here'\n"
    assert (path / "README.md").read_text() == "# readme\n"
    assert user_state(path) == state


def test_snapshot_and_restore_work_in_a_repo_without_commits(tmp_path: Path):
    path = new_repo(tmp_path / "repo", commit=False)
    (path / "staged.py").write_text("staged = 1\n")
    run(path, "add", "staged.py")
    (path / "loose.py").write_text("loose = 1\n")
    repo = git.Repo(path)
    state, disk = user_state(path), files_on_disk(path)
    assert state["head"] == ""

    before = snapshot(repo, checkpoint_ref("s", 1), "before")

    assert user_state(path) == state
    assert run(path, "log", "--format=%P", before).strip() == ""  # a root commit
    assert tree_files(path, before) == {"loose.py": "100644", "staged.py": "100644"}
    (path / "staged.py").write_text("staged = 'agent'\n")
    (path / "loose.py").unlink()
    (path / "made.py").write_text("made = 1\n")
    restore(repo, before, None, checkpoint_ref("s", 1, "undo"))
    assert files_on_disk(path) == disk
    assert user_state(path) == state


def test_a_stash_entry_is_left_exactly_as_it_was(tmp_path: Path):
    path = new_repo(tmp_path / "repo")
    (path / "README.md").write_text("# stashed change\n")
    run(path, "stash", "push", "-q", "-m", "my work")
    (path / "README.md").write_text("# current change\n")
    repo = git.Repo(path)
    state = user_state(path)
    stashed = run(path, "stash", "show", "-p", "stash@{0}")
    assert "my work" in state["stash"]

    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / "README.md").write_text("# agent\n")
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")
    restore(repo, before, after, checkpoint_ref("s", 1, "undo"))

    assert (path / "README.md").read_text() == "# current change\n"
    assert user_state(path) == state
    assert run(path, "stash", "show", "-p", "stash@{0}") == stashed


def test_restoring_the_undo_ref_brings_back_the_agents_version(tmp_path: Path):
    path = new_repo(tmp_path / "repo")
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / "README.md").write_text("# agent\n")
    (path / "tool.py").write_text("tool = 1\n")
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")
    agent_disk = files_on_disk(path)
    undo = checkpoint_ref("s", 1, "undo")

    restore(repo, before, after, undo)
    assert (path / "README.md").read_text() == "# readme\n"
    assert not (path / "tool.py").exists()
    plan = restore(repo, undo, None, checkpoint_ref("s", 1, "redo"))

    assert plan.changed == ["README.md", "tool.py"]
    assert files_on_disk(path) == agent_disk
    assert run(path, "rev-parse", f"{undo}^{{tree}}") == run(path, "rev-parse", f"{after}^{{tree}}")


def test_restore_refuses_when_the_user_edited_a_file_after_the_agent_and_force_overrides(
        tmp_path: Path):
    path = new_repo(tmp_path / "repo")
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / "README.md").write_text("# agent\n")
    (path / "a.py").write_text("a = 'agent'\n")
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")
    (path / "a.py").write_text("a = 'user fixed it'\n")
    (path / "other.py").write_text("unrelated = 1\n")
    disk = files_on_disk(path)

    assert plan_restore(repo, before, after).conflicts == ["a.py"]
    with pytest.raises(RestoreConflict) as caught:
        restore(repo, before, after, checkpoint_ref("s", 1, "undo"))
    assert caught.value.conflicts == ["a.py"]
    assert "a.py" in str(caught.value) and "--force" in str(caught.value)
    assert files_on_disk(path) == disk

    plan = restore(repo, before, after, checkpoint_ref("s", 1, "undo"), force=True)
    assert plan.changed == ["README.md", "a.py"] and plan.conflicts == ["a.py"]
    assert not (path / "a.py").exists()
    assert (path / "README.md").read_text() == "# readme\n"
    assert (path / "other.py").read_text() == "unrelated = 1\n"  # not the task's file


def test_plan_without_an_after_snapshot_restores_everything_changed_since(tmp_path: Path):
    path = new_repo(tmp_path / "repo")
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / "x.py").write_text("x = 1\n")
    (path / "README.md").unlink()
    plan = plan_restore(repo, before, None)
    assert (plan.changed, plan.conflicts) == (["README.md", "x.py"], [])


def test_diff_shows_the_agents_change_and_is_empty_when_nothing_changed(tmp_path: Path):
    path = new_repo(tmp_path / "repo")
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    assert diff(repo, before) == ""
    (path / "README.md").write_text("# readme\nagent line\n")
    (path / "new.py").write_text("x = 1\n")
    state = user_state(path)

    text = diff(repo, before)

    assert user_state(path) == state
    assert "diff --git a/README.md b/README.md" in text
    assert "+agent line\n" in text
    assert "diff --git a/new.py b/new.py\nnew file mode 100644" in text
    assert "+x = 1\n" in text
    assert text.endswith("\n")


def commit_names(path: Path, sha: str) -> str:
    return run(path, "show", "--format=%s", "--name-status", sha).strip()


def task_repo(tmp_path: Path) -> tuple[Path, git.Repo, str, str]:
    """The user edited pre.py and staged unrelated.txt; then the agent edited pre.py,
    created new.py and deleted old.py."""
    path = new_repo(tmp_path / "repo")
    (path / "pre.py").write_text("pre = 0\n")
    (path / "old.py").write_text("old = 0\n")
    (path / "unrelated.txt").write_text("0\n")
    run(path, "add", "-A")
    run(path, "commit", "-q", "-m", "base")
    (path / "pre.py").write_text("pre = 'user'\n")
    (path / "unrelated.txt").write_text("staged by user\n")
    run(path, "add", "unrelated.txt")
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / "pre.py").write_text("pre = 'user and agent'\n")
    (path / "new.py").write_text("new = 1\n")
    (path / "old.py").unlink()
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")
    return path, repo, before, after


def test_commit_task_commits_only_the_tasks_files_and_leaves_the_users_changes_alone(
        tmp_path: Path):
    path, repo, before, after = task_repo(tmp_path)
    base = run(path, "rev-parse", "HEAD").strip()

    sha = commit_task(repo, before, after, "Task 1: add new.py")

    assert sha == run(path, "rev-parse", "refs/heads/main").strip()
    assert run(path, "rev-parse", f"{sha}^").strip() == base
    assert commit_names(path, sha) == "Task 1: add new.py\n\nA\tnew.py\nD\told.py"
    assert run(path, "log", "-1", "--format=%an", sha).strip() == "Ada User"
    assert run(path, "diff", "--cached", "--name-only") == "unrelated.txt\n"
    assert run(path, "status", "--porcelain") == " M pre.py\nM  unrelated.txt\n"


def test_commit_task_with_include_preexisting_commits_the_users_earlier_edits_too(
        tmp_path: Path):
    path, repo, before, after = task_repo(tmp_path)

    sha = commit_task(repo, before, after, "Task 1", include_preexisting=True)

    assert commit_names(path, sha) == "Task 1\n\nA\tnew.py\nD\told.py\nM\tpre.py"
    assert blob(path, sha, "pre.py") == "pre = 'user and agent'\n"
    assert run(path, "status", "--porcelain") == "M  unrelated.txt\n"


def test_commit_task_returns_none_when_the_task_changed_nothing_of_its_own(tmp_path: Path):
    path = new_repo(tmp_path / "repo")
    (path / "README.md").write_text("# user was editing\n")
    repo = git.Repo(path)
    head = run(path, "rev-parse", "HEAD")
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    assert commit_task(repo, before, before, "nothing") is None
    (path / "README.md").write_text("# user was editing, then the agent\n")
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")

    assert commit_task(repo, before, after, "nothing") is None

    assert run(path, "rev-parse", "HEAD") == head
    assert run(path, "status", "--porcelain") == " M README.md\n"


def test_commit_task_skips_a_staged_new_file_the_task_deleted(tmp_path: Path):
    path = new_repo(tmp_path / "repo")
    (path / "draft.py").write_text("draft = 1\n")
    run(path, "add", "draft.py")
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / "draft.py").unlink()
    (path / "final.py").write_text("final = 1\n")
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")

    sha = commit_task(repo, before, after, "Task 1", include_preexisting=True)

    assert commit_names(path, sha) == "Task 1\n\nA\tfinal.py"
    assert run(path, "status", "--porcelain") == ""


def test_commit_task_makes_the_first_commit_of_an_empty_repo(tmp_path: Path):
    path = new_repo(tmp_path / "repo", commit=False)
    (path / "notes.md").write_text("user's own notes\n")
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / "app.py").write_text("print('hi')\n")
    (path / "tests").mkdir()
    (path / "tests" / "test_app.py").write_text("def test_app():\n    pass\n")
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")

    sha = commit_task(repo, before, after, "Task 1: app")

    assert sha == run(path, "rev-parse", "main").strip()
    assert run(path, "log", "--format=%P", sha).strip() == ""
    assert commit_names(path, sha) == "Task 1: app\n\nA\tapp.py\nA\ttests/test_app.py"
    assert run(path, "status", "--porcelain") == "?? notes.md\n"


def test_commit_task_works_on_a_detached_head(tmp_path: Path):
    path = new_repo(tmp_path / "repo")
    run(path, "checkout", "-q", "--detach")
    main = run(path, "rev-parse", "main")
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / "a.py").write_text("a = 1\n")
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")

    sha = commit_task(repo, before, after, "detached work")

    assert sha == run(path, "rev-parse", "HEAD").strip()
    assert run(path, "symbolic-ref", "-q", "HEAD", check=False) == ""
    assert run(path, "rev-parse", "main") == main
    assert commit_names(path, sha) == "detached work\n\nA\ta.py"


def test_snapshot_restore_and_commit_work_without_any_git_identity(tmp_path: Path):
    path = new_repo(tmp_path / "repo", identity=False, commit=False)
    run(path, "config", "user.useConfigOnly", "true")  # no guessing from the host name
    assert subprocess.run(["git", "var", "GIT_AUTHOR_IDENT"], cwd=path,
                          capture_output=True).returncode != 0
    (path / "a.py").write_text("a = 0\n")
    repo = git.Repo(path)

    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / "a.py").write_text("a = 1\n")
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")
    restore(repo, before, after, checkpoint_ref("s", 1, "undo"))
    assert (path / "a.py").read_text() == "a = 0\n"
    (path / "b.py").write_text("b = 1\n")
    after2 = snapshot(repo, checkpoint_ref("s", 2), "after 2")
    sha = commit_task(repo, before, after2, "identity-less")

    assert run(path, "log", "-1", "--format=%an <%ae>|%cn <%ce>", sha).strip() == (
        "dflash-agent <dflash-agent@localhost>|dflash-agent <dflash-agent@localhost>")
    assert commit_names(path, sha) == "identity-less\n\nA\tb.py"


def test_open_repo_outside_a_repository_says_to_run_git_init(tmp_path: Path):
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(RepoStateError) as caught:
        open_repo(plain)
    assert "not inside a git repository" in str(caught.value)
    assert "run `git init`" in str(caught.value) and "--no-git" in str(caught.value)


def test_open_repo_from_a_subdirectory_opens_the_enclosing_repository(tmp_path: Path):
    path = new_repo(tmp_path / "repo")
    (path / "a" / "b").mkdir(parents=True)
    repo = open_repo(path / "a" / "b")
    assert Path(repo.working_tree_dir) == path.resolve()


def conflicting_branches(tmp_path: Path) -> Path:
    """main and feature both change README.md differently; feature is checked out."""
    path = new_repo(tmp_path / "repo")
    run(path, "checkout", "-q", "-b", "feature")
    (path / "README.md").write_text("# feature\n")
    run(path, "commit", "-q", "-am", "feature")
    run(path, "checkout", "-q", "main")
    (path / "README.md").write_text("# main\n")
    run(path, "commit", "-q", "-am", "main")
    run(path, "checkout", "-q", "feature")
    return path


def test_open_repo_refuses_in_the_middle_of_a_merge(tmp_path: Path):
    path = conflicting_branches(tmp_path)
    assert "CONFLICT" in run(path, "merge", "main", check=False)
    assert (path / ".git" / "MERGE_HEAD").exists()
    with pytest.raises(RepoStateError) as caught:
        open_repo(path)
    assert "a merge is in progress" in str(caught.value)
    assert "git merge --abort" in str(caught.value)


def test_open_repo_refuses_in_the_middle_of_a_rebase(tmp_path: Path):
    path = conflicting_branches(tmp_path)
    proc = subprocess.run(["git", "rebase", "main"], cwd=path, capture_output=True, text=True)
    assert proc.returncode != 0 and "CONFLICT" in proc.stdout + proc.stderr
    with pytest.raises(RepoStateError) as caught:
        open_repo(path)
    assert "a rebase is in progress" in str(caught.value)
    assert "git rebase --abort" in str(caught.value)


def test_open_repo_refuses_in_the_middle_of_a_cherry_pick(tmp_path: Path):
    path = conflicting_branches(tmp_path)
    run(path, "cherry-pick", "main", check=False)
    assert (path / ".git" / "CHERRY_PICK_HEAD").exists()
    with pytest.raises(RepoStateError, match="a cherry-pick is in progress"):
        open_repo(path)


def test_restore_of_a_file_whose_name_is_not_utf8(tmp_path: Path):
    """A field trial: a Latin-1 name from an old zip (relat\\xf3rio.txt) edited by the task made
    the undo an internal error (UnicodeEncodeError) that restored nothing."""
    path = new_repo(tmp_path / "repo")
    name = os.fsdecode(b"relat\xf3rio.txt")
    (path / name).write_text("valor = 1\n")
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(["git", "commit", "-qm", "latin-1 name"], cwd=path, check=True)
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / name).write_text("valor = 3\n")
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after")
    plan = restore(repo, before, after, checkpoint_ref("s", 1, "undo"))
    assert plan.changed == [name]
    assert (path / name).read_text() == "valor = 1\n"
