"""Undo puts back the user's stash entries and staged state when the model's shell changed them.

A field trial in full-auto: the model ran `git checkout -- calc.py && git reset -q && rm
NOTES.md && git stash drop -q`. `agent undo` brought the files back, but the user's
``stash@{0}`` was gone for good (only `git fsck` could find it) and a file the user had staged
was unstaged, and nothing said so. Real `agent run` processes against the scripted model, real
git repositories.
"""

import shlex
import subprocess
from pathlib import Path

import git
import pytest

from agent.sessions.undo import undo_task
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel
from tests.test_cli_ux import agent, call

CALC = "def add(a, b):\n    return a - b\n"


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    """A repository with a stash entry ("my wip") and a staged change to app.py."""
    r = committed_repo(tmp_path / "repo", {"calc.py": CALC, "app.py": "x = 1\n"})
    root = Path(r.working_tree_dir)
    (root / "calc.py").write_text(CALC + "# work in progress\n")
    r.git.stash("push", "-q", "-m", "my wip")
    (root / "app.py").write_text("x = 2\n")
    r.git.add("app.py")
    return r


def stash(r: git.Repo) -> list[str]:
    """Every stash entry as ``<sha> <message>``, top first."""
    return r.git.stash("list", "--format=%H %gs").splitlines()


def staged(r: git.Repo) -> tuple[str, str]:
    """The index entries and what `git status` says."""
    return r.git.ls_files("-s"), r.git.status("--porcelain")


def run_bash(r: git.Repo, home: Path, command: str) -> str:
    """`agent run --approval full-auto` whose model runs ``command`` in its shell; returns the
    session id."""
    script = [call("bash", command=command), call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        proc = agent("run", "tidy up", "--tool-protocol", "json", "--approval", "full-auto",
                     "--base-url", model.url, home=home, cwd=Path(r.working_tree_dir))
    assert proc.returncode == 0, proc.stderr
    return proc.stderr.split("session ")[-1].split()[0]


def test_undo_brings_back_a_stash_entry_and_staging_the_model_dropped(repo: git.Repo,
                                                                      agent_home: Path):
    root = Path(repo.working_tree_dir)
    stashed, index = stash(repo), staged(repo)
    run_bash(repo, agent_home, "git stash drop -q && git reset -q")
    assert stash(repo) == [] and "M  app.py" not in repo.git.status("--porcelain")
    undone = agent("undo", home=agent_home, cwd=root)
    assert undone.returncode == 0, undone.stderr
    assert stash(repo) == stashed  # the same commit, the same message
    assert staged(repo) == index
    assert repo.git.show(":app.py") == "x = 2"
    # The task changed no file: the undo says what it put back, not "nothing to undo".
    message = stashed[0].split(" ", 1)[1]
    assert undone.stdout.splitlines() == [f"stash entry back: stash@{{0}}: {message}",
                                          "staged again as you had it: app.py"]
    # Undoing the undo brings back the task's files, never the loss of the user's entry.
    redo = agent("undo", home=agent_home, cwd=root)
    assert redo.returncode == 0, redo.stderr
    assert stash(repo) == stashed


def test_a_cleared_stash_comes_back_in_order_and_the_plan_says_so(repo: git.Repo,
                                                                   agent_home: Path):
    root = Path(repo.working_tree_dir)
    for n in (2, 3):
        (root / "calc.py").write_text(CALC + f"# try {n}\n")
        repo.git.stash("push", "-q", "-m", f"try {n}", "--", "calc.py")
    stashed, index = stash(repo), staged(repo)
    session = run_bash(repo, agent_home, "echo new > new.py && git add new.py && git stash clear")
    assert stash(repo) == [] and "new.py" in repo.git.ls_files()
    plan = undo_task(session)
    assert stash(repo) == stashed and staged(repo) == index
    assert not (root / "new.py").exists()
    messages = [line.split(" ", 1)[1] for line in stashed]
    assert plan.stash_restored == [f"stash@{{{n}}}: {m}" for n, m in enumerate(messages)]
    assert plan.index_restored == ["new.py"] and plan.not_restored == []
    assert plan.index_unstaged == ["new.py"]  # the task staged it; the undo unstaged it
    assert plan.removed == ["new.py"]


def test_undo_of_a_task_that_left_the_stash_alone_changes_nothing_in_it(repo: git.Repo,
                                                                         agent_home: Path):
    root = Path(repo.working_tree_dir)
    (root / "calc.py").write_text(CALC + "# second\n")
    repo.git.stash("push", "-q", "-m", "second", "--", "calc.py")  # app.py stays staged
    reflog = repo.git.reflog("show", "--format=%H %gd %gs %ct", "refs/stash")
    index = staged(repo)
    session = run_bash(repo, agent_home, "sed -i s/a-b/a+b/ calc.py && echo x > other.txt")
    plan = undo_task(session)
    assert plan.changed == ["other.txt"]
    assert repo.git.reflog("show", "--format=%H %gd %gs %ct", "refs/stash") == reflog
    assert staged(repo) == index
    assert (plan.stash_restored, plan.index_restored, plan.not_restored) == ([], [], [])


def test_what_the_user_did_after_the_agent_is_never_undone(repo: git.Repo, agent_home: Path):
    """An entry the user dropped after the agent stays dropped; staging the user redid after
    the agent is left as it is, and the plan gives the command that stages it as before."""
    root = Path(repo.working_tree_dir)
    (root / "calc.py").write_text(CALC + "# second\n")
    repo.git.stash("push", "-q", "-m", "second", "--", "calc.py")  # app.py stays staged
    [second, first] = stash(repo)
    assert repo.git.show(":app.py") == "x = 2"
    session = run_bash(repo, agent_home, "git stash drop -q stash@{1} && git reset -q")
    repo.git.stash("drop", "-q")  # the user drops "second" on purpose
    (root / "app.py").write_text("x = 3\n")
    repo.git.add("app.py")
    plan = undo_task(session)
    assert stash(repo) == [first]
    assert plan.stash_restored == [f"stash@{{0}}: {first.split(' ', 1)[1]}"]
    assert plan.index_restored == [] and repo.git.show(":app.py") == "x = 3"
    [note] = plan.not_restored
    assert "app.py" in note and "changed again after the agent finished" in note
    subprocess.run(shlex.split(note.split("`")[1]), cwd=root, check=True)
    assert repo.git.show(":app.py") == "x = 2"


def test_what_git_refuses_to_put_back_is_reported_with_the_command(repo: git.Repo,
                                                                   agent_home: Path):
    root = Path(repo.working_tree_dir)
    stashed, index = stash(repo), staged(repo)
    session = run_bash(repo, agent_home, "git stash drop -q && git reset -q")
    git_dir = Path(repo.git_dir)
    locks = [git_dir / "refs" / "stash.lock", git_dir / "index.lock"]
    for lock in locks:
        lock.touch()  # another git command at work
    plan = undo_task(session)
    assert plan.stash_restored == [] and plan.index_restored == []
    assert len(plan.not_restored) == 2
    for lock in locks:
        lock.unlink()
    for note in plan.not_restored:
        subprocess.run(shlex.split(note.split("`")[-2]), cwd=root, check=True)
    assert stash(repo) == stashed and staged(repo) == index


def test_undo_says_it_unstaged_what_the_task_staged(repo: git.Repo, agent_home: Path):
    """A field trial: undo of a task that ran `git add b.txt` said "staged again as you had
    it: b.txt" while it unstaged it, as the user had it."""
    root = Path(repo.working_tree_dir)
    (root / "b.txt").write_text("b\n")
    repo.git.add("b.txt")
    repo.git.commit("-q", "-m", "b", "--", "b.txt")  # app.py stays staged
    (root / "calc.py").write_text(CALC + "# staged by the user\n")
    repo.git.add("calc.py")
    index = staged(repo)
    run_bash(repo, agent_home, "echo agent >> b.txt && git add b.txt && git reset -q calc.py")
    undone = agent("undo", home=agent_home, cwd=root)
    assert undone.returncode == 0, undone.stderr
    assert undone.stdout.splitlines() == ["restored b.txt",
                                          "unstaged, as you had it: b.txt",
                                          "staged again as you had it: calc.py"]
    assert staged(repo) == index
