"""`agent run` / `sessions` / `diff` / `undo` / `resume` as a user runs them, with the scripted
model on loopback (the loop's logic) and real git repositories."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import psutil
import pytest

from agent.config import load_settings
from agent.events import parse_event
from agent.sessions.repo import RepoSession
from agent.ui import Reporter
from tests.scripted import ScriptedModel, reply, wait_for_session_log

AGENT = [sys.executable, "-m", "agent"]


def call(tool: str, **arguments) -> dict:
    return reply(json.dumps({"tool": tool, "arguments": arguments}))


def final(text: str) -> list[dict]:
    """A final answer given twice: the first is refused once after an edit of code that no
    command checked (agent/finish.py; commands need approval in these runs)."""
    return [call("final_answer", text=text)] * 2


def wrote(path: str, text: str) -> list[dict]:
    """A task that writes a file that is not code, then ends: a final answer stands only after
    the task changed a file or ran a command (agent/finish.py)."""
    return [call("create", path=path, file_text="made\n"), call("final_answer", text=text)]


def agent(*args: str, home: Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1"}
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=env, stdin=subprocess.DEVNULL)


def chat(script: list[dict], lines: list[str], home: Path,
         cwd: Path) -> subprocess.CompletedProcess:
    """``agent chat`` against ``script`` with ``lines`` typed at its prompt."""
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1"}
    with ScriptedModel(script) as model:
        return subprocess.run([*AGENT, "chat", "--base-url", model.url], cwd=cwd, env=env,
                              input="\n".join(lines) + "\n", capture_output=True, text=True,
                              timeout=120)


@pytest.fixture
def repo(tmp_path: Path) -> git.Repo:
    r = git.Repo.init(tmp_path / "repo")
    with r.config_writer() as cfg:
        cfg.set_value("user", "name", "Test").set_value("user", "email", "t@example.com")
    root = Path(r.working_tree_dir)
    (root / "app.py").write_text("def add(a, b):\n    return a - b\n")
    (root / ".gitignore").write_text("*.log\n")
    r.index.add(["app.py", ".gitignore"])
    r.index.commit("init")
    (root / "notes.txt").write_text("user's own untracked notes\n")
    (root / "debug.log").write_text("ignored\n")
    return r


def _state(r: git.Repo) -> tuple[str, str, str, str]:
    return (r.head.commit.hexsha, r.git.status("--porcelain"), r.git.ls_files("-s"),
            r.git.stash("list"))


def test_run_then_sessions_diff_and_undo(repo: git.Repo, agent_home: Path):
    root = Path(repo.working_tree_dir)
    script = [call("str_replace", path="app.py", old_str="return a - b", new_str="return a + b"),
              call("create", path="test_app.py", file_text="from app import add\n"),
              *final("fixed add")]
    before = _state(repo)
    with ScriptedModel(script) as model:
        proc = agent("run", "fix add", "--base-url", model.url, home=agent_home, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert "return a + b" in (root / "app.py").read_text()
    session_id = proc.stderr.split("session ")[-1].split()[0]
    listed = agent("sessions", "--json", home=agent_home, cwd=root)
    entry = json.loads(listed.stdout)[0]
    assert entry["id"] == session_id and entry["tasks"] == 1 and entry["steps"] == 4
    diff = agent("diff", home=agent_home, cwd=root).stdout
    assert "-    return a - b" in diff and "+    return a + b" in diff and "test_app.py" in diff
    undone = agent("undo", home=agent_home, cwd=root)
    assert undone.returncode == 0, undone.stderr
    # The file the task created is deleted by the undo, and said so.
    assert undone.stdout.splitlines() == ["restored app.py", "removed test_app.py"]
    assert (root / "app.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert not (root / "test_app.py").exists()
    assert (root / "notes.txt").read_text() == "user's own untracked notes\n"
    assert _state(repo) == before  # HEAD, status, index and stash as the user left them
    redo = agent("undo", session_id, home=agent_home, cwd=root)  # the undo is undoable
    assert redo.returncode == 0 and "return a + b" in (root / "app.py").read_text()
    assert redo.stdout.splitlines() == ["restored app.py", "restored test_app.py"]


def test_undo_refuses_to_overwrite_a_file_the_user_changed_after_the_agent(
        repo: git.Repo, agent_home: Path):
    root = Path(repo.working_tree_dir)
    script = [call("str_replace", path="app.py", old_str="a - b", new_str="a + b"),
              *final("ok")]
    with ScriptedModel(script) as model:
        assert agent("run", "fix", "--base-url", model.url, home=agent_home,
                     cwd=root).returncode == 0
    (root / "app.py").write_text("my own rewrite\n")
    proc = agent("undo", home=agent_home, cwd=root)
    assert proc.returncode == 3 and "app.py" in proc.stderr
    assert (root / "app.py").read_text() == "my own rewrite\n"
    forced = agent("undo", "--force", home=agent_home, cwd=root)
    assert forced.returncode == 0 and "a - b" in (root / "app.py").read_text()


def test_run_with_commit_commits_only_the_tasks_files(repo: git.Repo, agent_home: Path):
    root = Path(repo.working_tree_dir)
    script = [call("create", path="new.py", file_text="x = 1\n"), *final("added new.py")]
    with ScriptedModel(script) as model:
        proc = agent("run", "add new.py", "--commit", "--base-url", model.url,
                     home=agent_home, cwd=root)
    assert proc.returncode == 0, proc.stderr
    head = repo.head.commit
    assert head.message.startswith("add new.py")
    assert sorted(head.stats.files) == ["new.py"]
    assert "notes.txt" in repo.untracked_files  # the user's file was left alone


def test_run_with_commit_says_what_it_left_out_and_why_it_did_not_commit(repo: git.Repo,
                                                                          agent_home: Path):
    """A field trial: --commit committed only the test file of a task that had also edited a
    file the user had changed before it, and said only "committed <sha>"; a task that stopped
    was not committed, and nothing said so."""
    root = Path(repo.working_tree_dir)
    (root / "app.py").write_text((root / "app.py").read_text() + "# mine, not committed\n")
    script = [call("str_replace", path="app.py", old_str="# mine", new_str="# mine (kept)"),
              call("create", path="test_app.py", file_text="def test_x():\n    pass\n"),
              *final("done")]
    with ScriptedModel(script) as model:
        proc = agent("run", "add a test", "--commit", "--base-url", model.url,
                     home=agent_home, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert sorted(repo.head.commit.stats.files) == ["test_app.py"]
    assert ("(left out, changed by you before the task: app.py; --include-user-changes "
            "commits them too)") in proc.stderr
    head = repo.head.commit.hexsha
    with ScriptedModel([call("view", path="app.py")]) as model:
        proc = agent("run", "look", "--commit", "--max-steps", "1", "--base-url", model.url,
                     home=agent_home, cwd=root)
    assert proc.returncode == 1 and repo.head.commit.hexsha == head
    assert "not committed: the task did not finish (max_steps)" in proc.stderr


def test_run_with_commit_names_the_nested_repositories_it_leaves_uncommitted(
        repo: git.Repo, agent_home: Path):
    """`run --commit` of a task that edited a file in vendor/, a repository of its own, said
    "nothing to commit" and no more: the edit is vendor's to commit, and now it says so, the
    outer repository's own files committed as before."""
    root = Path(repo.working_tree_dir)
    vendor = git.Repo.init(root / "vendor")
    with vendor.config_writer() as cfg:  # CI has no global identity
        cfg.set_value("user", "name", "U").set_value("user", "email", "u@example.com")
    (root / "vendor" / "lib.py").write_text("v = 1\n")
    vendor.git.add("lib.py")
    vendor.git.commit("-q", "-m", "vendor")
    vendor_head = vendor.head.commit.hexsha
    script = [call("str_replace", path="vendor/lib.py", old_str="v = 1", new_str="v = 2"),
              *final("done")]
    with ScriptedModel(script) as model:
        proc = agent("run", "bump v", "--commit", "--base-url", model.url,
                     home=agent_home, cwd=root)
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stderr.split())
    assert ("nothing to commit; not committed: the task's changes inside the nested "
            "repositories vendor (commit them there with git)") in said, proc.stderr
    assert vendor.head.commit.hexsha == vendor_head and vendor.is_dirty()
    script = [call("create", path="new.py", file_text="x = 1\n"), *final("added new.py")]
    with ScriptedModel(script) as model:
        proc = agent("run", "add new.py", "--commit", "--base-url", model.url,
                     home=agent_home, cwd=root)
    assert proc.returncode == 0 and sorted(repo.head.commit.stats.files) == ["new.py"]
    assert "nested" not in proc.stderr


def _without_root_reads() -> list[str]:
    """A command prefix under which this process obeys file modes: as root, without the
    capabilities that read any file (setpriv); as anyone else, none is needed."""
    if os.geteuid() != 0:
        return []
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv (util-linux): no file is unreadable")
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"]


def test_an_unreadable_untracked_file_is_left_out_of_checkpoints_not_fatal(
        repo: git.Repo, agent_home: Path):
    """A field trial: an untracked file the user cannot read (another user's, mode 0600)
    made every run exit 3 with git's "unable to index file". It is now left out of the
    checkpoints like an ignored file, said once, and run, diff and undo work around it."""
    root = Path(repo.working_tree_dir)
    private = root / "private.dat"
    private.write_text("someone else's\n")
    private.chmod(0)
    prefix = _without_root_reads()
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, *AGENT, *args], capture_output=True, text=True,
                              timeout=120, cwd=root, env=env, stdin=subprocess.DEVNULL)

    # The setup is what it claims: this user cannot read the file.
    assert subprocess.run([*prefix, "cat", str(private)], capture_output=True).returncode != 0
    script = [call("create", path="new.py", file_text="x = 1\n"), *final("added new.py")]
    with ScriptedModel(script) as model:
        proc = run("run", "add new.py", "--base-url", model.url)
    assert proc.returncode == 0, proc.stderr
    assert ("warning: not checkpointed, as they cannot be read: private.dat (agent undo will "
            "neither restore nor remove them)") in " ".join(proc.stderr.split())
    diff = run("diff")
    assert diff.returncode == 0 and "+x = 1" in diff.stdout and "private" not in diff.stdout
    undone = run("undo")
    assert undone.returncode == 0, undone.stderr
    assert undone.stdout.splitlines() == ["removed new.py"]
    assert private.read_text() == "someone else's\n" and private.stat().st_mode & 0o777 == 0


def test_undo_names_a_file_with_a_line_break_on_one_line(repo: git.Repo, agent_home: Path):
    """Undo printed the names it restored raw: a file the task named 'evil<newline>name'
    read as two lines of output (a second 'removed' line could be forged). They are shown as
    the tools show names, a newline as \\x0a."""
    root = Path(repo.working_tree_dir)
    script = [call("bash", command="printf x > \"$(printf 'evil\\nname.txt')\""),
              call("final_answer", text="made it")]
    with ScriptedModel(script) as model:
        assert agent("run", "make", "--approval", "full-auto", "--base-url", model.url,
                     home=agent_home, cwd=root).returncode == 0
    assert (root / "evil\nname.txt").exists()
    undone = agent("undo", home=agent_home, cwd=root)
    assert undone.returncode == 0, undone.stderr
    assert undone.stdout.splitlines() == ["removed evil\\x0aname.txt"]
    assert not (root / "evil\nname.txt").exists()


def test_a_file_made_unreadable_during_the_task_is_left_alone_not_fatal(
        repo: git.Repo, agent_home: Path):
    """The task replaced out.log, which the start checkpoint holds, by a file it cannot read:
    the end checkpoint failed with git's "unable to index file" (exit 3), as the undo's
    would have. It is left out of the checkpoint, and diff and undo leave it as it is, saying
    so, while they still undo the rest."""
    root = Path(repo.working_tree_dir)
    (root / "out.log").write_text("run 1\n")
    (root / ".gitignore").write_text("")  # out.log is the task's to cover, not ignored
    prefix = _without_root_reads()
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*prefix, *AGENT, *args], capture_output=True, text=True,
                              timeout=120, cwd=root, env=env, stdin=subprocess.DEVNULL)

    script = [call("create", path="new.py", file_text="x = 1\n"),
              call("bash", command="rm out.log && echo 'run 2' > out.log && chmod 0 out.log"),
              call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        proc = run("run", "rerun", "--approval", "full-auto", "--base-url", model.url)
    assert proc.returncode == 0, proc.stderr
    assert "not checkpointed, as they cannot be read: out.log" in " ".join(proc.stderr.split())
    diff = run("diff")
    assert diff.returncode == 0 and "+x = 1" in diff.stdout and "out.log" not in diff.stdout
    assert "note: out.log is not shown: it could not be read" in diff.stderr
    undone = run("undo")
    assert undone.returncode == 0, undone.stderr
    assert undone.stdout.splitlines() == ["removed new.py"]
    assert ("not put back: out.log: it could not be read when a checkpoint was taken; it is "
            "left as it is") in " ".join(undone.stderr.split())
    assert (root / "out.log").read_text() == "run 2\n"


def test_undo_after_commit_says_the_commit_stays(repo: git.Repo, agent_home: Path):
    """A field trial: `run --commit` then `undo` said only "removed new.py"; the commit
    stayed and git showed the file deleted, and nothing said why."""
    root = Path(repo.working_tree_dir)
    script = [call("create", path="new.py", file_text="x = 1\n"), *final("added new.py")]
    with ScriptedModel(script) as model:
        assert agent("run", "add new.py", "--commit", "--base-url", model.url,
                     home=agent_home, cwd=root).returncode == 0
    short = repo.head.commit.hexsha[:7]
    undone = agent("undo", home=agent_home, cwd=root)
    assert undone.returncode == 0 and undone.stdout.splitlines() == ["removed new.py"]
    assert (f"the commits made since the task started stay ({short} add new.py)"
            in " ".join(undone.stderr.split())), undone.stderr
    # Without a commit meanwhile, no note.
    redo = agent("undo", home=agent_home, cwd=root)
    assert redo.returncode == 0 and "commits made since" not in redo.stderr


def test_json_output_is_a_stream_of_valid_events(repo: git.Repo, agent_home: Path):
    root = Path(repo.working_tree_dir)
    script = [call("view", path="app.py"), *wrote("seen.txt", "ok")]
    with ScriptedModel(script) as model:
        proc = agent("run", "look", "--json", "--base-url", model.url, home=agent_home,
                     cwd=root)
    assert proc.returncode == 0, proc.stderr
    events = [parse_event(line) for line in proc.stdout.splitlines()]
    types = [e.type for e in events]
    assert types[0] == "session_start" and "checkpoint" in types and types[-1] == "checkpoint"
    assert "final_answer" in types and "tool_result" in types


def test_outside_a_git_repo_run_refuses_with_a_hint_unless_no_git(tmp_path: Path,
                                                                  agent_home: Path):
    plain = tmp_path / "plain"
    plain.mkdir()
    with ScriptedModel([call("create", path="a.txt", file_text="x"),
                        call("final_answer", text="ok")]) as model:
        proc = agent("run", "x", "--base-url", model.url, home=agent_home, cwd=plain)
        assert proc.returncode == 3 and "--no-git" in proc.stderr
        ok = agent("run", "x", "--no-git", "--base-url", model.url, home=agent_home, cwd=plain)
    assert ok.returncode == 0, ok.stderr
    assert (plain / "a.txt").read_text() == "x"
    # Without git there are no checkpoints: the last line offered an undo that failed.
    assert "(no git: no undo)" in ok.stderr and "agent undo" not in ok.stderr


def test_a_bash_call_that_needs_approval_fails_fast_without_a_terminal(repo: git.Repo,
                                                                      agent_home: Path):
    root = Path(repo.working_tree_dir)
    with ScriptedModel([call("bash", command="touch hacked")]) as model:
        proc = agent("run", "x", "--base-url", model.url, home=agent_home, cwd=root,
                     timeout=60)
    assert proc.returncode == 1 and "stdin is not a terminal" in proc.stderr
    assert not (root / "hacked").exists()


def test_resume_after_sigkill_mid_tool_answers_the_interrupted_call(repo: git.Repo,
                                                                   agent_home: Path,
                                                                   tmp_path: Path):
    root = Path(repo.working_tree_dir)
    marker = "sleep 47.25"
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home)}
    with ScriptedModel([call("bash", command=marker, timeout=120)]) as model:
        proc = subprocess.Popen([*AGENT, "run", "wait", "--approval", "full-auto",
                                 "--base-url", model.url], cwd=root, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        sessions = agent_home / "data" / "sessions"
        deadline = time.monotonic() + 60
        log = None
        while time.monotonic() < deadline:
            logs = [p for p in sessions.glob("*.jsonl") if p.name != "index.jsonl"] \
                if sessions.is_dir() else []
            if logs and '"type":"tool_call"' in logs[0].read_text():
                log = logs[0]
                break
            time.sleep(0.1)
        assert log is not None, "the agent never started the tool"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    for p in psutil.process_iter(["cmdline"]):
        if marker in " ".join(p.info["cmdline"] or []):
            p.kill()
    session_id = log.stem
    script = [call("bash", command="true"), call("final_answer", text="resumed")]
    with ScriptedModel(script) as model:
        settings = load_settings(cli={"base_url": model.url, "approval": "full-auto"})
        session = RepoSession(settings, root, Reporter(), resume=session_id)
        try:
            last = session.agent.messages[-1]
            # The text protocol (auto's choice) answers as a user message with the tool's name.
            assert last["role"] == "user" and "interrupted" in last["content"]
            assert last["content"].startswith("[result of tool bash]")
            result = session.run_task("go on")
        finally:
            session.close()
    assert result.reason == "done" and result.text == "resumed"
    sent = model.requests[0]["messages"]
    logged = [json.loads(line) for line in log.read_text().splitlines()]
    replayed = [e["message"] for e in logged if e["type"] == "message"]
    assert sent == replayed[: len(sent)]  # the exact conversation, so the server cache holds
    # The task's message: the project's files (it names none), then the task.
    assert sent[-1]["role"] == "user" and sent[-1]["content"].endswith("The task: go on")


def test_chat_slash_commands(repo: git.Repo, agent_home: Path):
    root = Path(repo.working_tree_dir)
    script = [call("create", path="made.txt", file_text="made\n"),
              call("final_answer", text="made it"), reply("summary: made.txt was created")]
    lines = ["make a file", "/diff", "/compact", "/status", "/bogus", "/undo", "/exit"]
    proc = chat(script, lines, home=agent_home, cwd=root)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "+made" in out  # /diff
    assert "compacted" in out and "into" in out  # /compact
    assert "tasks 1" in out  # /status
    assert "unknown command /bogus" in out
    assert "removed: made.txt" in out and "restored" not in out  # /undo
    assert not (root / "made.txt").exists()


def test_chat_help_lists_every_command_and_a_wrong_one_never_reaches_the_model(
        repo: git.Repo, agent_home: Path):
    """A field trial: chat had no /help; a mistyped command said "unknown command" with a
    list that left out /quit, and a task that starts with a path (/etc/hosts …) was taken
    for a command and never ran."""
    root = Path(repo.working_tree_dir)
    lines = ["/help", "/bogus", "/", "/diff now", "/undo --hard", "/status\tplease",
             "/etc/hosts: what is in it?", "/help", "/quit"]
    proc = chat([call("final_answer", text="localhost")], lines, home=agent_home, cwd=root)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("Type a task, or a command (/help lists them; /exit leaves).\n")
    shown = [re.sub(r"^(> )+", "", line) for line in out.splitlines()]  # input not echoed
    helped = [line.strip() for line in shown if line.startswith("  /")]
    for command in ("/undo [--force]", "/diff", "/commit", "/compact", "/status", "/help",
                    "/exit, /quit"):
        # One line each, saying what it does, once per /help.
        said = [h for h in helped if h.startswith(command + "  ")]
        assert len(said) == 2 and len(said[0]) > len(command) + 12, (command, out)
    assert len(helped) == 14, helped
    assert "unknown command /bogus; /help lists the commands" in out
    assert "unknown command /; /help lists the commands" in out
    assert "/diff takes no arguments; /help lists the commands" in out
    assert "/undo takes only --force; /help lists the commands" in out
    assert "/status takes no arguments" in out and "n_ctx" not in out
    # The task that starts with a path went to the model, and nothing else did.
    rows = json.loads(agent("sessions", "--json", home=agent_home, cwd=root).stdout)
    assert [(r["task"], r["tasks"]) for r in rows] == [("/etc/hosts: what is in it?", 1)]
    assert "localhost" in out + proc.stderr


def test_undo_and_diff_default_to_this_repositorys_session(repo: git.Repo, agent_home: Path,
                                                           tmp_path: Path):
    root = Path(repo.working_tree_dir)
    script = [call("create", path="x.txt", file_text="x"), call("final_answer", text="ok")]
    with ScriptedModel(script) as model:
        assert agent("run", "add x", "--base-url", model.url, home=agent_home,
                     cwd=root).returncode == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = agent("undo", home=agent_home, cwd=elsewhere)
    assert proc.returncode == 2 and "no saved session for this directory" in proc.stderr
    assert (root / "x.txt").exists()
    listed = json.loads(agent("sessions", "--json", home=agent_home, cwd=root).stdout)
    assert listed[0]["task"] == "add x"
    assert agent("undo", home=agent_home, cwd=root / ".").returncode == 0
    assert not (root / "x.txt").exists()


def test_a_failed_command_in_chat_does_not_end_the_session(repo: git.Repo, agent_home: Path):
    root = Path(repo.working_tree_dir)
    script = [call("create", path="made.txt", file_text="made\n"),
              call("final_answer", text="made it")]
    lines = ["/undo", "make a file", "/exit"]  # nothing to undo yet: an error, then work
    proc = chat(script, lines, home=agent_home, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert "ran no task: there is nothing to undo or compare" in proc.stdout
    assert "the session goes on" in proc.stdout
    assert (root / "made.txt").read_text() == "made\n"


@pytest.mark.parametrize("protocol", ["json", "native", "text"])
def test_resume_never_answers_a_call_twice_when_the_kill_fell_between_message_and_event(
        protocol: str, repo: git.Repo, agent_home: Path):
    """Field case 6: the result message was logged, the process died before its tool_result
    event; resume must not add an "interrupted" answer next to the real one."""
    root = Path(repo.working_tree_dir)
    # A create, so that the first final answer stands and the call's is the one tool result
    # (a view alone gets the final answer refused once: agent/finish.py).
    made = {"path": "made.txt", "file_text": "made\n"}
    if protocol == "json":
        script = [call("create", **made), call("final_answer", text="done")]
    elif protocol == "text":
        script = [reply("<create>\n<path>made.txt</path>\n<file_text>\nmade\n</file_text>\n"
                        "</create>"),
                  reply("<final_answer>\n<text>done</text>\n</final_answer>")]
    else:
        script = [reply(tool_calls=[("create", made)]), reply("done")]
    with ScriptedModel(script, supports_tools=protocol == "native") as model:
        proc = agent("run", "look", "--tool-protocol", protocol, "--base-url", model.url,
                     home=agent_home, cwd=root)
    assert proc.returncode == 0, proc.stderr
    [log] = [p for p in (agent_home / "data" / "sessions").glob("*.jsonl")
             if p.name != "index.jsonl"]
    lines = log.read_text().splitlines()
    kept = [line for line in lines if '"type":"tool_result"' not in line]
    assert len(kept) == len(lines) - 1
    log.write_text("\n".join(kept) + "\n")
    again = {"json": call("final_answer", text="again"),
             "text": reply("<final_answer>\n<text>again</text>\n</final_answer>")}.get(
                 protocol, reply("again"))
    # Twice: a task with no call that succeeded stops (nothing_done) on the second.
    with ScriptedModel([again, again], supports_tools=protocol == "native") as model:
        settings = load_settings(cli={"base_url": model.url, "approval": "full-auto",
                                      "tool_protocol": protocol})
        session = RepoSession(settings, root, Reporter(), resume=log.stem)
        try:
            session.run_task("and now?")
        finally:
            session.close()
    sent = model.requests[0]["messages"]
    results = [m for m in sent if m["role"] == "tool" or
               (m["role"] == "user" and str(m["content"]).startswith("[result of tool create]"))]
    assert len(results) == 1, sent
    assert not any("interrupted" in str(m.get("content")) for m in sent)


def test_chat_ends_on_a_fresh_line_and_names_its_session(repo: git.Repo, agent_home: Path):
    """A field trial: at end of input chat left the prompt without a newline and printed no
    session id or undo command (run does)."""
    root = Path(repo.working_tree_dir)
    proc = chat([call("final_answer", text="hello")], ["say hi"], agent_home, root)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith("> \n"), proc.stdout[-40:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("session ") and "(undo: agent undo " in last, proc.stderr


def test_chat_status_gives_the_context_from_ctx_size_when_the_server_does_not(
        tmp_path: Path, agent_home: Path):
    """/status printed "n_ctx None" while the session worked with --ctx-size's 4096."""
    with ScriptedModel([]) as model:
        model.props["default_generation_settings"] = {}
        env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1"}
        ran = subprocess.run([*AGENT, "chat", "--no-git", "--base-url", model.url,
                              "--ctx-size", "4096"], cwd=tmp_path, env=env,
                             input="/status\n/exit\n", capture_output=True, text=True,
                             timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert "tasks 0, n_ctx 4096 (ctx_size: the server does not say), model " \
        "/scripted/model.gguf" in ran.stdout


def test_chat_and_resume_take_the_step_and_time_limits_per_task(repo: git.Repo,
                                                                 agent_home: Path):
    """A field trial: a chat task stopped at the step limit said "raise --max-steps", an
    option chat did not have (only run did)."""
    root = Path(repo.working_tree_dir)
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1"}
    # Two steps a task: a final answer needs a call of its own task that succeeded first.
    script = [call("view", path="app.py"), call("view", path="."),
              call("create", path="made.txt", file_text="made\n"),
              call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        proc = subprocess.run([*AGENT, "chat", "--base-url", model.url, "--max-steps", "2",
                               "--max-time", "60"], cwd=root, env=env,
                              input="look\nfinish\n", capture_output=True, text=True,
                              timeout=120)
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout + proc.stderr
    # Each task has its own budget: the first stops at two calls, the second still runs.
    assert "the step limit (2 model calls) ran out" in said and "raise --max-steps" in said
    assert len(model.requests) == 4, said
    rows = json.loads(agent("sessions", "--json", home=agent_home, cwd=root).stdout)
    assert rows[0]["tasks"] == 2 and rows[0]["ended"] == "done", rows
    with ScriptedModel([call("view", path="app.py")]) as model:
        resumed = subprocess.run([*AGENT, "resume", "--last", "--base-url", model.url,
                                  "--max-steps", "1"], cwd=root, env=env,
                                 input="look again\n", capture_output=True, text=True,
                                 timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "the step limit (1 model calls) ran out" in resumed.stdout + resumed.stderr


def test_resume_last_takes_this_repositorys_latest_session(repo: git.Repo, agent_home: Path,
                                                          tmp_path: Path):
    """`resume --last` took the latest session of any repository: run in this one after a
    task elsewhere, it resumed the other repository's chat, its tools working there."""
    root = Path(repo.working_tree_dir)
    other = git.Repo.init(tmp_path / "other")
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1"}
    for where, task in ((root, "here"), (Path(other.working_tree_dir), "elsewhere")):
        with ScriptedModel(wrote(f"{task}.txt", "ok")) as model:
            assert agent("run", task, "--base-url", model.url, home=agent_home,
                         cwd=where).returncode == 0
    for args in (["--last"], []):
        with ScriptedModel(wrote(f"again{len(args)}.txt", "again")) as model:
            resumed = subprocess.run([*AGENT, "resume", *args, "--base-url", model.url],
                                     cwd=root, env=env, input="go on\n", capture_output=True,
                                     text=True, timeout=120)
        assert resumed.returncode == 0, resumed.stderr
        sent = json.dumps(model.requests[0]["messages"])
        assert "The task: here" in sent and "elsewhere" not in sent, sent
    elsewhere = tmp_path / "no-sessions"
    elsewhere.mkdir()
    proc = agent("resume", "--last", home=agent_home, cwd=elsewhere)
    assert proc.returncode == 2 and "no saved session for this directory" in proc.stderr


def test_a_bad_chat_limit_is_bad_usage(repo: git.Repo, agent_home: Path):
    root = Path(repo.working_tree_dir)
    with ScriptedModel(wrote("made.txt", "ok")) as model:  # a session to resume
        assert agent("run", "look", "--base-url", model.url, home=agent_home,
                     cwd=root).returncode == 0
    for command, flag, value in [("chat", "--max-steps", "0"), ("chat", "--max-time", "nan"),
                                 ("chat", "--max-time", "-1"), ("resume", "--max-steps", "-3"),
                                 ("resume", "--max-time", "0")]:
        proc = agent(command, flag, value, "--base-url", "http://127.0.0.1:9",
                     home=agent_home, cwd=root)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"error: {flag} {value}"), proc.stderr


def test_chat_undo_force_overwrites_what_the_user_changed_after_the_task(
        repo: git.Repo, agent_home: Path):
    """A field trial: /undo refused over an edit made after the task, saying "rerun with
    --force", and "/undo --force" was an unknown command."""
    root = Path(repo.working_tree_dir)
    script = [call("create", path="made.txt", file_text="made\n"),
              call("final_answer", text="made it")]
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1"}
    with ScriptedModel(script) as model:
        proc = subprocess.Popen([*AGENT, "chat", "--base-url", model.url], cwd=root, env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            proc.stdin.write("make a file\n")
            proc.stdin.flush()
            wait_for_session_log(agent_home, '"kind":"after"', "the task never ended")
            (root / "made.txt").write_text("the user's edit\n")
            out, err = proc.communicate("/undo\n/undo --force\n/exit\n", timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    assert "then type /undo --force to overwrite them; the session goes on" in out, out
    assert "unknown command" not in out and "removed: made.txt" in out, out
    assert not (root / "made.txt").exists()
