"""The file tools cannot be turned into command execution or into reads outside the workspace:
each attack found in the trials (prompt-injected model, default ``auto-edit`` approval) is a
test here, through the registry and through a real ``agent run`` with a scripted model."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.approvals import ApprovalUnavailable
from agent.sessions.approval import make_approver
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel
from tests.test_cli_ux import agent, call
from tools.registry import Registry, default_registry
from tools.workspace import Workspace


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    committed_repo(root, {"app.py": "x = 1\n"}).close()
    hook = root / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    return root


@pytest.fixture
def rreg(repo: Path):
    registry = default_registry(Workspace(repo))
    yield registry
    registry.close()


FSMONITOR = "[core]\n\tfsmonitor = touch {marker}\n"


def test_the_file_tools_never_write_into_git(rreg: Registry, repo: Path, tmp_path: Path):
    marker = tmp_path / "pwned"
    before = (repo / ".git" / "config").read_bytes()
    attacks = [
        ("create", {"path": ".git/config", "file_text": FSMONITOR.format(marker=marker)}),
        ("create", {"path": ".git/hooks/pre-commit", "file_text": f"#!/bin/sh\ntouch {marker}\n"}),
        ("str_replace", {"path": ".git/hooks/pre-commit", "old_str": "exit 0",
                         "new_str": f"touch {marker}"}),
        ("insert", {"path": ".git/config", "insert_line": 0, "text": "[core]\n"}),
        ("create", {"path": ".GIT/config", "file_text": "x"}),  # case-insensitive filesystems
        ("create", {"path": "sub/.git/config", "file_text": "x"}),  # nested repositories
        ("create", {"path": ".hg/hgrc", "file_text": "[hooks]\n"}),
        ("create", {"path": ".jj/repo/config.toml", "file_text": "x"}),
        ("create", {"path": str(repo / ".git" / "info" / "attributes"), "file_text": "x"}),
    ]
    for tool, args in attacks:
        obs = rreg.call(tool, args)
        assert obs.is_error, (tool, args, obs.text)
        assert "version-control folder" in obs.text and "bash tool" in obs.text, obs.text
    assert (repo / ".git" / "config").read_bytes() == before
    assert (repo / ".git" / "hooks" / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n"
    assert not (repo / ".hg").exists() and not (repo / "sub").exists()
    # The tools still read git's files; under ask and auto-edit the approver asks first
    # (.git/config can hold credentials: tests/test_secret_reads.py).
    assert not rreg.call("view", {"path": ".git/config"}).is_error


def test_a_symlink_into_git_is_not_a_way_in(rreg: Registry, repo: Path):
    (repo / "innocent.txt").symlink_to(repo / ".git" / "config")
    obs = rreg.call("create", {"path": "innocent.txt", "file_text": "[core]\n\tfsmonitor = x\n"})
    assert obs.is_error and "version-control folder" in obs.text
    assert "fsmonitor" not in (repo / ".git" / "config").read_text()


def test_auto_edit_asks_before_an_edit_git_would_interpret(repo: Path):
    ws = Workspace(repo)
    (repo / ".git" / "config").write_text((repo / ".git" / "config").read_text()
                                          + "[include]\n\tpath = ../shared.gitconfig\n")
    asked: list[str] = []
    approve = make_approver("auto-edit", ask=lambda q: asked.append(q) or "no",
                            interactive=True, sensitive=ws.git_interpreted,
                            preapproved=lambda _call: True)  # a skill pre-approving create
    for path in (".gitattributes", "sub/.gitmodules", ".lfsconfig", "shared.gitconfig"):
        asked.clear()
        verdict = approve({"name": "create", "arguments": {"path": path, "file_text": "x"}})
        assert verdict == "no" and asked, path
        assert "configuration" in asked[0]
    # Ordinary edits still run without asking under auto-edit, .gitignore included.
    for path in ("app.py", ".gitignore", "docs/git.md"):
        assert approve({"name": "create", "arguments": {"path": path, "file_text": "x"}}) is None
    headless = make_approver("auto-edit", interactive=False, sensitive=ws.git_interpreted)
    with pytest.raises(ApprovalUnavailable, match="configuration"):
        headless({"name": "str_replace", "arguments": {"path": ".gitattributes",
                                                       "old_str": "a", "new_str": "b"}})


def test_an_injected_model_cannot_run_commands_through_git_under_auto_edit(
        repo: Path, agent_home: Path, tmp_path: Path):
    """The trial's attacks end to end: fsmonitor in .git/config, a clean filter with a
    .gitattributes line, and a rewritten pre-commit hook, then a commit by the agent."""
    marker = tmp_path / "pwned"
    script = [
        call("create", path=".git/config", file_text=FSMONITOR.format(marker=marker)),
        call("create", path=".git/hooks/pre-commit", file_text=f"#!/bin/sh\ntouch {marker}\n"),
        call("create", path=".gitattributes", file_text="*.py filter=evil\n"),
        call("final_answer", text="done"),
    ]
    with ScriptedModel(script) as model:
        proc = agent("run", "tidy up", "--tool-protocol", "json", "--base-url", model.url,
                     "--commit", home=agent_home, cwd=repo)
    # The .gitattributes edit needs approval, and there is no terminal: the task stops there.
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "needs approval" in proc.stdout + proc.stderr
    assert not marker.exists(), "a command planted through git ran"
    assert "fsmonitor" not in (repo / ".git" / "config").read_text()
    assert "touch" not in (repo / ".git" / "hooks" / "pre-commit").read_text()
    assert not (repo / ".gitattributes").exists()
    texts = [m["content"] for r in model.requests for m in r["messages"]
             if m["role"] in ("user", "tool")]
    assert any("version-control folder" in t for t in texts)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text("root:x:0:0:OUTSIDE-SECRET\n")
    (folder / "nested").mkdir()
    (folder / "nested" / "more.txt").write_text("OUTSIDE-SECRET too\n")
    return folder


def test_search_and_listings_do_not_follow_symlinks_out_of_the_workspace(
        reg: Registry, ws: Path, outside: Path):
    (ws / "passwd").symlink_to(outside / "secret.txt")
    (ws / "elsewhere").symlink_to(outside)
    (ws / "etc-passwd").symlink_to("/etc/passwd")
    (ws / "inside.txt").write_text("inside line OUTSIDE-SECRET-lookalike\n")
    (ws / "alias.txt").symlink_to(ws / "inside.txt")  # inside links keep working
    # The links are named as skipped (issue 28 item 9); nothing behind them is shown, not even
    # where they lead.
    skipped = ["elsewhere/ -> outside the workspace, skipped",
               "etc-passwd -> outside the workspace, skipped"]
    passwd = "passwd -> outside the workspace, skipped"
    grep = reg.call("grep", {"pattern": "OUTSIDE-SECRET|root:"})
    assert grep.text.splitlines() == ["alias.txt:1: inside line OUTSIDE-SECRET-lookalike",
                                      *skipped,
                                      "inside.txt:1: inside line OUTSIDE-SECRET-lookalike",
                                      passwd]
    assert reg.call("grep", {"pattern": "root", "path": "etc-passwd"}).is_error
    for obs in (reg.call("glob", {"pattern": "**/*"}), reg.call("view", {"path": "."})):
        assert obs.text.splitlines() == ["alias.txt", *skipped, "inside.txt", passwd], obs.text
        assert str(outside) not in obs.text and "/etc" not in obs.text
    for tool, args in [("view", {"path": "passwd"}), ("view", {"path": "elsewhere"}),
                       ("glob", {"pattern": "*", "path": "elsewhere"}),
                       ("grep", {"pattern": "x", "path": "elsewhere"}),
                       ("create", {"path": "elsewhere/new.txt", "file_text": "x"}),
                       ("str_replace", {"path": "passwd", "old_str": "root", "new_str": "r"}),
                       ("insert", {"path": "passwd", "insert_line": 0, "text": "x"})]:
        obs = reg.call(tool, args)
        assert obs.is_error and "outside the workspace" in obs.text, (tool, obs.text)
    assert (outside / "secret.txt").read_text() == "root:x:0:0:OUTSIDE-SECRET\n"
    assert not (outside / "new.txt").exists()
    assert reg.call("view", {"path": "alias.txt"}).text.endswith("OUTSIDE-SECRET-lookalike")


def test_a_symlink_swapped_in_after_the_check_is_not_followed(ws: Path, outside: Path):
    """The time-of-check/time-of-use race: a folder replaced by a symlink after ``resolve``."""
    workspace = Workspace(ws)
    (ws / "src").mkdir()
    (ws / "src" / "secret.txt").write_text("inside\n")
    full = workspace.resolve("src/secret.txt")
    target = workspace.resolve("src/new.txt")
    (ws / "src" / "secret.txt").unlink()
    (ws / "src").rmdir()
    (ws / "src").symlink_to(outside)
    with pytest.raises(OSError):
        workspace.read_bytes(full)
    with pytest.raises(OSError):
        workspace.atomic_write(target, b"planted")
    assert not (outside / "new.txt").exists()
    (ws / "src").unlink()
    (ws / "src").mkdir()
    (ws / "src" / "last").symlink_to(outside / "secret.txt")
    with pytest.raises(OSError):
        workspace.read_bytes(ws / "src" / "last")  # the final component is never followed


def test_create_is_no_oracle_for_a_file_outside_through_a_symlink(reg: Registry, ws: Path,
                                                                   outside: Path):
    """``create`` compares its text with the file's to say "unchanged": through a symlink that
    would tell an injected model whether a guess matches a file outside the workspace. The
    link is refused before anything is read, for the right guess as for a wrong one."""
    (ws / "passwd").symlink_to(outside / "secret.txt")
    for guess in ("root:x:0:0:OUTSIDE-SECRET\n", "wrong\n"):
        obs = reg.call("create", {"path": "passwd", "file_text": guess})
        assert obs.is_error and "outside the workspace" in obs.text, obs.text
        assert "unchanged" not in obs.text and "replaced" not in obs.text
    assert (outside / "secret.txt").read_text() == "root:x:0:0:OUTSIDE-SECRET\n"
    assert (ws / "passwd").is_symlink()


def test_undo_edit_goes_through_the_same_checks(reg: Registry, ws: Path, outside: Path):
    assert not reg.call("create", {"path": "a.txt", "file_text": "one\n"}).is_error
    assert not reg.call("create", {"path": "a.txt", "file_text": "two\n"}).is_error
    (ws / "a.txt").unlink()
    (ws / "a.txt").symlink_to(outside / "secret.txt")
    obs = reg.call("undo_edit", {"path": "a.txt"})
    assert obs.is_error and "outside the workspace" in obs.text
    assert (outside / "secret.txt").read_text() == "root:x:0:0:OUTSIDE-SECRET\n"


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_session_logs_and_the_home_are_private(repo: Path, agent_home: Path):
    """Session logs hold every tool output (secrets included): 0600 files in 0700 folders,
    also when the home existed before with the old, world-readable modes."""
    (agent_home / "data" / "sessions").mkdir(parents=True)
    (agent_home / "data").chmod(0o755)
    (agent_home / "data" / "sessions").chmod(0o755)
    (agent_home / "data" / "sessions" / "index.jsonl").write_text("")
    (agent_home / "data" / "sessions" / "index.jsonl").chmod(0o644)
    # A file written: a final answer stands only after the task changed a file or ran a
    # command (agent/finish.py).
    script = [call("view", path="app.py"), call("create", path="notes.txt", file_text="n\n"),
              call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        proc = agent("run", "look", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    sessions = agent_home / "data" / "sessions"
    logs = list(sessions.glob("*.jsonl"))
    assert len(logs) == 2  # the session's own log and the index
    for log in logs:
        assert _mode(log) == 0o600, log
    for folder in ("config", "cache", "state", "data", "data/sessions", "state/servers",
                   "state/crashes"):
        assert _mode(agent_home / folder) == 0o700, folder


def test_crash_logs_are_private(agent_home: Path):
    from agent.errors import write_crash_log

    path = Path(write_crash_log(RuntimeError("boom")))
    assert _mode(path) == 0o600 and _mode(path.parent) == 0o700
