"""Field cases 4, 5 and 7: config and session files that are broken on disk give a clear
error (never an internal one), and a session log cut mid-line still undoes and diffs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel
from tests.test_cli_ux import AGENT, agent, call


def final(text: str) -> list[dict]:
    """A final answer given twice: the first is refused once after an edit of code that no
    command checked (agent/finish.py; commands need approval in these runs)."""
    return [call("final_answer", text=text)] * 2


WROTE = [call("create", path="made.txt", file_text="made\n"), call("final_answer", text="ok")]
"""A task that writes a file that is not code, then ends: a final answer stands only after
the task changed a file or ran a command (agent/finish.py)."""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    committed_repo(tmp_path / "repo", {"app.py": "x = 1\n"}).close()
    return tmp_path / "repo"


@pytest.mark.parametrize(("name", "make", "expected"), [
    ("config.toml", lambda p: p.write_bytes(b'preset = "caf\xe9"\n'), "not UTF-8"),
    ("config.toml", lambda p: p.mkdir(), "is a directory"),
    ("presets.toml", lambda p: p.write_bytes(b"[x]\nmodel = '\xff'\n"), "not UTF-8"),
    ("presets.toml", lambda p: p.mkdir(), "is a directory"),
], ids=["config-latin1", "config-dir", "presets-latin1", "presets-dir"])
def test_a_broken_config_file_is_a_clear_error(name: str, make, expected: str, repo: Path,
                                               agent_home: Path):
    (agent_home / "config").mkdir(parents=True)
    make(agent_home / "config" / name)
    proc = agent("run", "look", "--base-url", "http://127.0.0.1:9", home=agent_home, cwd=repo)
    assert proc.returncode == 3, proc.stderr
    assert expected in proc.stderr and name in proc.stderr
    assert "internal error" not in proc.stderr


def test_a_session_index_with_bytes_that_are_not_utf8_still_lists(repo: Path,
                                                                   agent_home: Path):
    with ScriptedModel(WROTE) as model:
        assert agent("run", "look", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo).returncode == 0
    index = agent_home / "data" / "sessions" / "index.jsonl"
    index.write_bytes(index.read_bytes() + b'{"id": "caf\xe9", "task": "\xff"}\n')
    for args in (["sessions"], ["sessions", "--json"]):
        proc = agent(*args, home=agent_home, cwd=repo)
        assert proc.returncode == 0, proc.stderr
        assert "look" in proc.stdout


def _edited_session(repo: Path, home: Path) -> Path:
    # The view first: create over a file the session has not seen is refused (tools.edits).
    script = [call("view", path="app.py"), call("create", path="app.py", file_text="x = 2\n"),
              *final("done")]
    with ScriptedModel(script) as model:
        proc = agent("run", "bump x", "--tool-protocol", "json", "--base-url", model.url,
                     home=home, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    [log] = [p for p in (home / "data" / "sessions").glob("*.jsonl") if p.name != "index.jsonl"]
    return log


def test_a_log_cut_mid_line_still_undoes_and_diffs(repo: Path, agent_home: Path):
    log = _edited_session(repo, agent_home)
    log.write_bytes(log.read_bytes() + b'{"type": "model_turn", "session_id": "x", "st')
    diff = agent("diff", home=agent_home, cwd=repo)
    assert diff.returncode == 0, diff.stderr
    assert "+x = 2" in diff.stdout and "cut off mid-write" in diff.stderr
    undo = agent("undo", home=agent_home, cwd=repo)
    assert undo.returncode == 0, undo.stderr
    assert (repo / "app.py").read_text() == "x = 1\n"


def test_corruption_inside_a_log_is_reported_but_undo_still_works(repo: Path,
                                                                  agent_home: Path):
    log = _edited_session(repo, agent_home)
    lines = log.read_bytes().split(b"\n")
    lines.insert(2, b"\xff garbage that is not an event")
    log.write_bytes(b"\n".join(lines))
    undo = agent("undo", home=agent_home, cwd=repo)
    assert undo.returncode == 0, undo.stderr
    assert ":3: skipped a line that is not a valid event" in undo.stderr
    assert (repo / "app.py").read_text() == "x = 1\n"


def test_temporary_indexes_left_by_a_killed_run_are_swept(repo: Path):
    from agent.sessions.checkpoints.plumbing import open_repo

    git_dir = repo / ".git"
    dead = git_dir / "dflash-agent-index-999999999-abc"  # no such pid
    live = git_dir / f"dflash-agent-index-{os.getpid()}-def"  # a session snapshotting now
    old = git_dir / "dflash-agent-index-ghi"  # an older version's name, two hours old
    for folder in (dead, live, old):
        folder.mkdir()
        (folder / "index").write_bytes(b"DIRC")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    open_repo(repo).close()
    assert not dead.exists() and not old.exists()
    assert live.exists()


def test_a_damaged_log_line_is_said_plainly_by_resume_and_undo(repo: Path, agent_home: Path):
    """Issue 28 item 3: which line, what is wrong with it, what still works; no pydantic dump
    (the union's class list, error codes, a documentation URL)."""
    log = _edited_session(repo, agent_home)
    lines = log.read_bytes().split(b"\n")
    lines.insert(2, b'{"type": "tool_cal", "session_id": "x"}')
    log.write_bytes(b"\n".join(lines))
    resume = agent("resume", "--last", home=agent_home, cwd=repo)
    undo = agent("undo", home=agent_home, cwd=repo)
    assert resume.returncode == 3 and undo.returncode == 0, resume.stderr + undo.stderr
    for stderr in (resume.stderr, undo.stderr):
        assert f"{log.name}:3:" in stderr and "its type 'tool_cal' is not an event type" in stderr
        assert "tagged-union" not in stderr and "pydantic" not in stderr
    assert "`agent undo` and `agent diff` skip this one and still work" in resume.stderr
    assert "undo and diff use the rest of the log" in undo.stderr


def test_an_empty_chat_is_not_what_undo_diff_and_resume_pick(repo: Path, agent_home: Path):
    """A chat left without a task (Ctrl-D at its first prompt) is saved too, and it is the
    newest: `agent undo` said "nothing to undo" and `agent diff` "(no changes)" while the task
    before it had edited app.py, and `agent resume` opened the empty conversation."""
    log = _edited_session(repo, agent_home)
    with ScriptedModel([]) as model:
        chat = agent("chat", "--base-url", model.url, home=agent_home, cwd=repo)
    assert chat.returncode == 0, chat.stderr
    assert "(no task ran: nothing to undo" in chat.stderr  # not "undo: agent undo <id>"
    sessions = [p for p in (agent_home / "data" / "sessions").glob("*.jsonl")
                if p.name != "index.jsonl"]
    assert len(sessions) == 2, sessions
    diff = agent("diff", home=agent_home, cwd=repo)
    assert diff.returncode == 0 and "+x = 2" in diff.stdout, diff.stdout + diff.stderr
    with ScriptedModel([]) as model:
        resume = agent("resume", "--base-url", model.url, home=agent_home, cwd=repo)
    assert resume.returncode == 0, resume.stderr
    assert f"session {log.stem}" in resume.stderr, resume.stderr
    undo = agent("undo", home=agent_home, cwd=repo)
    assert undo.returncode == 0, undo.stderr
    assert (repo / "app.py").read_text() == "x = 1\n"


def test_sessions_leaves_out_a_chat_left_without_a_task(repo: Path, agent_home: Path):
    """A field trial: a chat opened and left without a task was listed by `agent sessions`
    ("no task run"), clutter among the sessions that did something. Its log is kept (its id
    still names it); a chat that ran a task, even one that failed, is listed."""
    assert agent("sessions", home=agent_home, cwd=repo).stdout == "no sessions yet\n"
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1"}
    with ScriptedModel([]) as model:
        for typed in ("/status\n/compact\n/exit\n", ""):
            left = subprocess.run([*AGENT, "chat", "--base-url", model.url], cwd=repo,
                                  env=env, input=typed, capture_output=True, text=True,
                                  timeout=120)
            assert left.returncode == 0, left.stderr
            assert "compacted" not in left.stdout
            assert typed == "" or "nothing to compact yet: no task has run" in left.stdout
            assert "(no task ran: nothing to undo, and `agent sessions` does not list it)" \
                in left.stderr, left.stderr
    folder = agent_home / "data" / "sessions"
    empty = sorted(p.stem for p in folder.glob("2*.jsonl"))
    assert len(empty) == 2 and len((folder / "index.jsonl").read_text().splitlines()) == 2
    listed = agent("sessions", home=agent_home, cwd=repo)
    assert listed.returncode == 0 and listed.stdout == "no sessions yet\n", listed.stdout
    assert json.loads(agent("sessions", "--json", home=agent_home, cwd=repo).stdout) == []
    with ScriptedModel(WROTE) as model:
        assert agent("run", "look", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo).returncode == 0
    with ScriptedModel([]) as model:  # the model never answers: the task fails
        failed = subprocess.run([*AGENT, "chat", "--base-url", model.url], cwd=repo, env=env,
                                input="do it\n", capture_output=True, text=True, timeout=120)
    assert failed.returncode == 0, failed.stderr
    rows = json.loads(agent("sessions", "--json", home=agent_home, cwd=repo).stdout)
    assert [(r["task"], r["tasks"]) for r in rows] == [("do it", 1), ("look", 1)], rows
    text = agent("sessions", home=agent_home, cwd=repo).stdout
    assert len(text.splitlines()) == 2 and not any(e in text for e in empty), text
    assert all((folder / f"{e}.jsonl").is_file() for e in empty)


def test_a_session_that_died_writing_its_first_line_after_the_start_is_still_listed(
        agent_home: Path, tmp_path: Path):
    """Only a log that holds nothing but its start is empty: one cut off mid-write (its first
    task, maybe) is listed, and so is a session whose index names what it was asked."""
    from agent.sessions.log import list_sessions

    folder = agent_home / "data" / "sessions"
    folder.mkdir(parents=True)
    start = json.dumps({"type": "session_start", "session_id": "a", "task": "",
                        "workspace": str(tmp_path)})
    system = json.dumps({"type": "message", "session_id": "a",
                         "message": {"role": "system", "content": "you are"}})
    logs = {"bare": f"{start}\n{system}\n", "torn": f'{start}\n{{"type": "task_st',
            "asked": f"{start}\n"}
    with (folder / "index.jsonl").open("w") as index:
        for n, (name, text) in enumerate(logs.items()):
            (folder / f"{name}.jsonl").write_text(text)
            index.write(json.dumps({"id": name, "task": "a todo app" if name == "asked" else "",
                                    "workspace": str(tmp_path), "started": n}) + "\n")
    assert {s.id: s.ended for s in list_sessions()} == {"torn": "no_task", "asked": "no_task"}


def test_undo_in_a_nested_repository_never_touches_the_one_around_it(repo: Path,
                                                                     agent_home: Path):
    """A field trial: a task in the outer repository, an empty chat in a repository inside it;
    `agent undo` from the inner one reverted the outer one's app.py (and said only "restored
    app.py")."""
    _edited_session(repo, agent_home)
    inner = repo / "inner"
    committed_repo(inner, {"i.py": "i = 1\n"}).close()
    with ScriptedModel([]) as model:
        assert agent("chat", "--base-url", model.url, home=agent_home,
                     cwd=inner).returncode == 0
    for command in ("diff", "undo"):
        proc = agent(command, home=agent_home, cwd=inner)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "there is no saved session for this directory" in proc.stderr
    assert (repo / "app.py").read_text() == "x = 2\n"
    undo = agent("undo", home=agent_home, cwd=repo)  # from the outer one: its task, named
    assert undo.returncode == 0 and (repo / "app.py").read_text() == "x = 1\n", undo.stderr
    assert undo.stderr.startswith("session ") and f"({repo})" in undo.stderr.splitlines()[0]


def test_undo_in_a_nested_repository_with_no_session_of_its_own_leaves_the_outer_one(
        repo: Path, agent_home: Path):
    """Without a session of the inner repository (not even an empty chat), `agent undo` and
    `agent diff` from inside it took the outer repository's task: undo reverted its app.py."""
    _edited_session(repo, agent_home)
    inner = repo / "inner"
    committed_repo(inner, {"i.py": "i = 1\n"}).close()
    (inner / "sub").mkdir()
    for cwd in (inner, inner / "sub"):
        for command in ("diff", "undo"):
            proc = agent(command, home=agent_home, cwd=cwd)
            assert proc.returncode == 2, proc.stdout + proc.stderr
            assert "there is no saved session for this directory" in proc.stderr
    assert (repo / "app.py").read_text() == "x = 2\n"
    # From the outer repository its own task is still the one undone.
    assert agent("undo", home=agent_home, cwd=repo).returncode == 0
    assert (repo / "app.py").read_text() == "x = 1\n"


def test_a_latin1_terminal_and_an_ascii_stdout_are_no_internal_error(repo: Path,
                                                                      agent_home: Path):
    """A field trial (a Portuguese user): a task typed in a Latin-1 terminal under a UTF-8
    locale ("ol\\xe1") was an internal error that left an empty session; `agent sessions` on
    a stdout that cannot show an emoji was exit 4; so was `agent diff` piped, whose bytes must
    be git's whatever the locale."""
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1"}
    script = [call("view", path="app.py"), call("create", path="app.py", file_text="x = 'ç 🚀'\n"),
              *final("feito")]
    with ScriptedModel(script) as model:
        proc = subprocess.run([sys.executable, "-m", "agent", "run", b"ol\xe1 fun\xe7\xe3o \xf0",
                               "--tool-protocol", "json", "--base-url", model.url],
                              cwd=repo, env=env, capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    [entry] = json.loads(agent("sessions", "--json", home=agent_home, cwd=repo).stdout)
    assert entry["task"] == "olá função ð"
    ascii_env = {**env, "PYTHONIOENCODING": "ascii"}
    listed = subprocess.run([sys.executable, "-m", "agent", "sessions"], cwd=repo,
                            env=ascii_env, capture_output=True, timeout=120)
    assert listed.returncode == 0, listed.stderr.decode()
    assert b"ol\\xe1 fun\\xe7\\xe3o" in listed.stdout
    diff = subprocess.run([sys.executable, "-m", "agent", "diff"], cwd=repo, env=ascii_env,
                          capture_output=True, timeout=120)
    assert diff.returncode == 0, diff.stderr.decode()
    assert "+x = 'ç 🚀'".encode() in diff.stdout


def test_a_torn_index_line_never_hides_the_next_session_from_sessions_and_undo(
        repo: Path, agent_home: Path):
    """A field trial: the index's last line cut mid-write (a crash, a full disk) glued the
    next session's entry onto it; that session vanished from `agent sessions`, and `agent
    undo` undid the task before it. An index an older version left glued still lists both."""
    _edited_session(repo, agent_home)
    index = agent_home / "data" / "sessions" / "index.jsonl"
    torn = b'{"id": "2026'
    index.write_bytes(index.read_bytes() + torn)
    script = [call("create", path="b.py", file_text="b = 1\n"), *final("done")]
    with ScriptedModel(script) as model:
        assert agent("run", "add b", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo).returncode == 0
    lines = index.read_bytes().split(b"\n")
    assert lines[1] == torn and len(lines) == 4 and lines[3] == b"", lines  # kept whole
    tasks = ["add b", "bump x"]

    def listed() -> list[str]:
        proc = agent("sessions", "--json", home=agent_home, cwd=repo)
        assert proc.returncode == 0, proc.stderr
        return [s["task"] for s in json.loads(proc.stdout)]

    assert listed() == tasks
    index.write_bytes(index.read_bytes().replace(torn + b"\n", torn))  # as it was glued
    assert listed() == tasks
    app = (repo / "app.py").read_text()
    undo = agent("undo", home=agent_home, cwd=repo)
    assert undo.returncode == 0, undo.stderr
    assert undo.stdout == "removed b.py\n", undo.stdout + undo.stderr
    assert not (repo / "b.py").exists() and (repo / "app.py").read_text() == app


def test_an_empty_session_log_is_listed_as_unknown(repo: Path, agent_home: Path):
    """The README says a damaged log is listed as unknown; a log of 0 bytes (the session
    stopped before writing its start: a crash, a full disk) was left out as if it were a chat
    left without a task, which logs its start."""
    log = _edited_session(repo, agent_home)
    log.write_bytes(b"")
    proc = agent("sessions", "--json", home=agent_home, cwd=repo)
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)
    assert (row["id"], row["ended"], row["tasks"]) == (log.stem, "unknown", 0), row
    assert row["end_detail"] == "unknown (the log is empty: the session stopped before " \
        "writing its start)"
