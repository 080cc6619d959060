"""What a task's checkpoints cover, from a field trial: files the ignore rules hid when the task
started, files in nested repositories, a run killed before its end checkpoint, sessions that
ran at once, and large untracked files. Real git repositories; `agent run` against the
scripted model where the whole command is what matters."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git

from agent.sessions.checkpoints import (
    checkpoint_ref,
    diff,
    restore,
    snapshot,
)
from tests.scripted import ScriptedModel
from tests.test_checkpoints import isolated_git, new_repo, run, tree_files
from tests.test_cli_ux import agent, call

__all__ = ["isolated_git"]  # the autouse fixture: no global git config, no identity leaks

SECRET = "KEY=precious\n"


def stored(path: Path, text: str) -> bool:
    """Whether a blob with exactly ``text`` is in the repository's object store."""
    sha = subprocess.run(["git", "hash-object", "--stdin"], input=text, cwd=path,
                         capture_output=True, text=True, check=True).stdout.strip()
    return subprocess.run(["git", "cat-file", "-e", sha], cwd=path).returncode == 0


def secret_repo(tmp_path: Path) -> Path:
    """A repository whose committed .gitignore hides an untracked .env with a secret."""
    path = new_repo(tmp_path / "repo")
    (path / ".gitignore").write_text(".env\n")
    run(path, "add", ".gitignore")
    run(path, "commit", "-q", "-m", "ignore .env")
    (path / ".env").write_text(SECRET)
    return path


def run_task(path: Path, home: Path, *calls: dict) -> subprocess.CompletedProcess:
    """`agent run` whose model makes ``calls`` then answers; asserts it succeeded."""
    script = [*calls, call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        proc = agent("run", "do it", "--tool-protocol", "json", "--approval", "full-auto",
                     "--base-url", model.url, home=home, cwd=path)
    assert proc.returncode == 0, proc.stderr
    return proc


# --- 1. files the ignore rules hid when the task started -----------------------------------


def test_a_secret_the_task_unignores_is_never_stored_shown_or_removed(tmp_path: Path):
    path = secret_repo(tmp_path)
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / ".gitignore").write_text("*.pyc\n")  # the task's rewrite un-ignores .env
    run(path, "add", "-A")  # and its shell stages everything, .env too
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after", since=before)

    assert ".env" not in tree_files(path, after)
    assert "b/.env" not in diff(repo, before, after) and "b/.env" not in diff(repo, before)
    plan = restore(repo, before, after, checkpoint_ref("s", 1, "undo"))
    assert plan.changed == [".gitignore"] and plan.removed == []
    assert (path / ".env").read_text() == SECRET
    assert (path / ".gitignore").read_text() == ".env\n"
    # The task's own `git add` stored it; the checkpoints did not: without that add, nothing.
    path2 = secret_repo(tmp_path / "second")
    repo2 = git.Repo(path2)
    before2 = snapshot(repo2, checkpoint_ref("s", 1), "before")
    (path2 / ".gitignore").write_text("*.pyc\n")
    snapshot(repo2, checkpoint_ref("s", 1, "after"), "after", since=before2)
    restore(repo2, before2, None, checkpoint_ref("s", 1, "undo"))
    assert not stored(path2, SECRET)


def test_a_file_the_task_starts_ignoring_stays_covered(tmp_path: Path):
    """The other way round: a task that adds an untracked file to .gitignore did not delete
    it, and an undo must not write it back over what the user did since."""
    path = new_repo(tmp_path / "repo")
    (path / "notes.txt").write_text("mine\n")
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / ".gitignore").write_text("notes.txt\n")
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after", since=before)
    assert "notes.txt" in tree_files(path, after)
    (path / "notes.txt").write_text("mine, edited after the task\n")

    plan = restore(repo, before, after, checkpoint_ref("s", 1, "undo"))

    assert plan.changed == [".gitignore"] and plan.removed == [".gitignore"]
    assert (path / "notes.txt").read_text() == "mine, edited after the task\n"


def test_a_later_task_of_the_session_does_not_store_the_unignored_secret(tmp_path: Path):
    path = secret_repo(tmp_path)
    repo = git.Repo(path)
    before = snapshot(repo, checkpoint_ref("s", 1), "before")
    (path / ".gitignore").write_text("*.pyc\n")
    after = snapshot(repo, checkpoint_ref("s", 1, "after"), "after", since=before)
    second = snapshot(repo, checkpoint_ref("s", 2), "before 2", since=after)
    assert ".env" not in tree_files(path, second)
    assert not stored(path, SECRET)


def test_undo_and_diff_of_a_run_that_unignored_a_secret(tmp_path: Path, agent_home: Path):
    """The field trial, as the user ran it."""
    path = secret_repo(tmp_path)
    run_task(path, agent_home, call("view", path=".gitignore"),
             call("create", path=".gitignore", file_text="*.pyc\n"))
    shown = agent("diff", home=agent_home, cwd=path)
    assert shown.returncode == 0 and ".gitignore" in shown.stdout
    assert "b/.env" not in shown.stdout and "precious" not in shown.stdout
    undone = agent("undo", home=agent_home, cwd=path)
    assert undone.returncode == 0, undone.stderr
    assert undone.stdout.splitlines() == ["restored .gitignore"]
    assert (path / ".env").read_text() == SECRET
    assert not stored(path, SECRET)
