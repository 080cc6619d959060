"""``agent new-project`` against hostile or careless input: projects whose tests leave
processes running or print megabytes, plans that try to reach outside the project, Ctrl-C,
target directories that are already there. Each case: a clear error or an honest verdict,
nothing of the user's lost, the documented exit code."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import git
import psutil
import pytest

from agent.loop import LoopResult
from agent.newproject import runners
from agent.newproject.commit import commit_message
from agent.newproject.environment import project_env
from agent.newproject.names import module_name, slugify
from agent.newproject.plan import executables, outside_project, parse_plan
from agent.newproject.result import ProjectResult
from agent.newproject.runners import TestReport, run_project_tests
from agent.newproject.work import time_for_tests
from agent.sessions.log import list_sessions
from tests.scripted import ScriptedModel
from tests.test_newproject_ecosystems import call, new_project, plan_reply

MAKE_PLAN = dict(toolchain="c-make", language="C", summary="a Makefile project",
                 files=["Makefile"], install=[], test="make test", run="")


def _make_project(folder: Path, recipe: str) -> Path:
    folder.mkdir()
    (folder / "Makefile").write_text(f"test:\n{recipe}", "utf-8")
    return folder


def _running_in(folder: Path) -> list[psutil.Process]:
    """Live processes whose working directory is ``folder``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and Path(proc.cwd()) == folder:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def test_tests_that_leave_a_background_process_holding_the_output_are_judged_when_they_end(
        tmp_path: Path):
    """The background ``sleep`` inherits the runner's output; the verdict comes when the
    tests end, not when the ``sleep`` would (it is killed)."""
    proj = _make_project(tmp_path / "p", "\tsleep 120 & echo $$! > bg.pid\n"
                         "\techo '1 passed, 0 failed'\n")
    report = run_project_tests(proj, "c-make", project_env(proj), timeout=30)
    # Waiting for the sleep would have ended in "timeout".
    assert report.status == "passed" and report.counts == "1 passed, 0 failed"
    pid = int((proj / "bg.pid").read_text("utf-8"))
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_tests_that_hang_are_stopped_and_their_last_lines_say_where(tmp_path: Path):
    proj = _make_project(tmp_path / "p", "\t@echo 'test_parser ... ok'\n"
                         "\t@echo 'test_network ... waiting'\n\t@sleep 60\n")
    report = run_project_tests(proj, "c-make", project_env(proj), timeout=3)
    assert report.status == "timeout"
    assert not _running_in(proj)  # make and its sleep are gone
    assert report.detail.startswith("make test did not finish within 3 s; its last lines:")
    assert report.detail.endswith("test_parser ... ok\ntest_network ... waiting")


def _makefile_project(description: str, target: Path, home: Path, makefile: str,
                      *extra: str) -> tuple[subprocess.CompletedProcess, ScriptedModel]:
    """new-project of a Makefile project whose model writes ``makefile`` and says it is done
    (again after each failing test run the product sends back)."""
    done = call("final_answer", text="done")
    script = [plan_reply(**MAKE_PLAN), call("create", path="Makefile", file_text=makefile),
              done, done, done]
    with ScriptedModel(script) as model:
        proc = new_project(description, target, model, home, None, *extra)
    return proc, model


def test_a_hanging_test_run_keeps_to_max_time(tmp_path: Path, agent_home: Path):
    """Before, each test run of the product got 600 s whatever --max-time said (and again
    for each fix round)."""
    target = tmp_path / "hang"
    proc, _ = _makefile_project("a hanging project", target, agent_home,
                                "test:\n\t@echo 'test_network ... waiting'\n\t@sleep 300\n",
                                "--max-time", "5")
    assert proc.returncode == 1, proc.stderr
    said = proc.stdout.split("Tests (run by dflash-agent): ")[1]
    within = int(said.split("did not finish within ")[1].split(" s")[0])
    assert said.startswith("timeout") and within <= 5, proc.stdout
    assert "(tests: timeout)" in git.Repo(target).head.commit.message


def test_the_test_run_gets_what_the_task_has_left_but_never_nothing(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr("agent.newproject.work.time.monotonic", lambda: now[0])
    assert time_for_tests(900, started=1000 - 100) == 600  # the runner's own cap
    assert time_for_tests(900, started=1000 - 500) == 400  # what is left
    assert time_for_tests(900, started=1000 - 899) == 60  # time used up: a minute still
    assert time_for_tests(5, started=1000 - 10) == 5  # a budget under a minute: all of it


def test_tests_that_print_without_end_are_stopped(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch):
    """Before, the output was kept until the timeout: all of it, in memory or on disk."""
    monkeypatch.setattr(runners, "MAX_OUTPUT", 1 << 20)
    proj = _make_project(tmp_path / "p", "\t@yes | head -c 20000000\n\t@sleep 30\n")
    report = run_project_tests(proj, "c-make", project_env(proj), timeout=60)
    # Not stopped, it would have passed after the sleep.
    assert report.status == "error (more than 1 MiB of output)"
    assert report.detail.startswith("make test was stopped after printing more than 1 MiB")


def test_a_huge_line_of_test_output_is_cut_where_it_is_shown(tmp_path: Path):
    proj = _make_project(tmp_path / "p", "\t@python3 -c \"print('1 passed ' + 'x' * 2000000)\"\n"
                         "\t@python3 -c \"print('y' * 3000000)\"\n\tfalse\n")
    report = run_project_tests(proj, "c-make", project_env(proj))
    assert report.status == "failed"
    assert len(report.detail) < 10_000 and "more characters]" in report.detail
    assert len(report.counts) < 1_000


def test_a_project_whose_failing_tests_print_megabytes_is_still_committed(tmp_path: Path,
                                                                         agent_home: Path):
    """Before, the failing run went back to the model whole and overflowed its context
    (exit 3, nothing committed)."""
    target = tmp_path / "loud"
    proc, model = _makefile_project(
        "a loud project", target, agent_home,
        "test:\n\t@python3 -c \"print('x' * 3000000)\"\n\tfalse\n")
    assert proc.returncode == 1, proc.stderr
    message = git.Repo(target).head.commit.message
    assert message.startswith("New project: a loud project (tests: failed)")
    assert len(message) < 10_000
    assert max(len(str(r)) for r in model.requests) < 100_000


def test_ctrl_c_while_the_product_runs_the_tests_leaves_the_files_and_says_interrupted(
        tmp_path: Path, agent_home: Path):
    """Before, the session's log ended on the agent's answer: `agent sessions` said done."""
    target = tmp_path / "slow"
    script = [plan_reply(**MAKE_PLAN),
              call("create", path="Makefile", file_text="test:\n\tsleep 60\n"),
              call("final_answer", text="done")]
    env = {**os.environ, "NO_COLOR": "1", "HOME": str(tmp_path / "user")}
    with ScriptedModel(script) as model:
        # Its own session, as a terminal's foreground job: Ctrl-C reaches every process in it.
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent", "new-project", "a slow project", "--dir",
             str(target), "--base-url", model.url, "--tool-protocol", "json", "--recipe",
             "full"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
            stdin=subprocess.DEVNULL, start_new_session=True)
        assert proc.stderr is not None
        for line in proc.stderr:
            if "running the project's tests" in line:
                break
        time.sleep(1)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert (target / "Makefile").read_text("utf-8") == "test:\n\tsleep 60\n"
    repo = git.Repo(target)
    assert not repo.head.is_valid() and not repo.index.entries  # nothing committed or staged
    assert "Files: .gitignore, Makefile" in out  # what is there, not "(none)"
    assert "Commit: (not committed: interrupted)" in out  # it said "(nothing to commit)"
    [session] = list_sessions()
    assert session.ended == "interrupted"


def test_plan_commands_that_reach_outside_the_project_are_refused_however_written():
    """Before, only a first word of sudo or a -g/--user flag was caught: another line, a
    background '&', a substitution, a wrapper, a folder flag or a cd got through."""
    escapes = {
        "npm install\nsudo rm -rf /": "another user (sudo)",
        "npm i & sudo tee /etc/x": "another user (sudo)",
        "echo $(sudo id)": "another user (sudo)",
        "echo `doas id`": "another user (doas)",
        "(sudo make install)": "another user (sudo)",
        "env -i sudo x": "another user (sudo)",
        "bash -c 'pip install --user x'": "--user",
        "cd .. && npm install": "leaves the project (cd ..)",
        "cd src && cd ../.. && make": "leaves the project (cd ../..)",
        "cd && npm i": "leaves the project (cd)",
        "cd ~/x": "leaves the project",
        "npm install --location global x": "a folder outside it",
        "npm install --prefix=/usr/local x": "a folder outside it",
        "pip install --target /usr/lib/python3/dist-packages x": "a folder outside it",
        "python -m pip install --prefix ~/.local x": "a folder outside it",
        "uv pip install --system x": "--user",
        "cargo install ripgrep": "(cargo install)",
        "go install golang.org/x/tools/gopls@latest": "(go install)",
        "apt-get install -y libfoo-dev": "(apt-get install)",
        "pipx install black": "(pipx install)",
        "npm config set prefix /usr": "(npm config)",
    }
    for command, said in escapes.items():
        why = outside_project(command)
        assert why and said in why, (command, why)
    for command in ("npm install left-pad", "python -m pip install -e .",
                    "cd web && npm test", "cd src && cd .. && make test",
                    "cargo test 2>&1 | tee test.log", "go test ./... &> out.txt",
                    "npm install --prefix ./web", "pip install --target vendor x",
                    "gcc -g -o t t.c", "npm install --location project x"):
        assert outside_project(command) is None, command
    # A redirection's '&' does not make its file descriptor a program.
    assert executables("cargo test 2>&1 | tee log; CI=1 env npm test") == ["cargo", "tee",
                                                                           "npm"]
    plan = {"toolchain": "node", "language": "JavaScript", "summary": "s",
            "files": ["package.json"], "install": ["npm install"],
            "test": "cd .. && npm test", "run": ""}
    got, problems = parse_plan(json.dumps(plan))
    assert got is None and any("leaves the project (cd ..)" in p for p in problems)
    got, problems = parse_plan(json.dumps({**plan, "test": "npm test",
                                           "run": "sudo node server.js"}))
    assert got is None and any("another user (sudo)" in p for p in problems)


def test_a_plan_whose_words_look_like_terminal_markup_is_shown_as_written(tmp_path: Path,
                                                                        agent_home: Path):
    """Before, the plan's summary went to the terminal as rich markup: '[/bold]' crashed the
    command (exit 4, an internal error, on the model's words)."""
    summary = "counts [/bold] words [red]loudly"
    script = [plan_reply(**{**MAKE_PLAN, "summary": summary}),
              call("create", path="Makefile", file_text="test:\n\t@echo '1 passed, 0 failed'\n"),
              call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        proc = new_project("a word counter", tmp_path / "wc", model, agent_home)
    assert proc.returncode == 0, proc.stderr
    assert f"plan: toolchain: c-make (C) - {summary}" in proc.stderr


def test_force_keeps_what_the_folder_had(tmp_path: Path, agent_home: Path):
    """--force on a folder with files but no git: they are committed before the model writes
    (before, a file the model overwrote was gone); on a git repository with uncommitted
    changes: refused before the model is asked anything (before, the changes could be
    overwritten, or went into the new project's commit)."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("my notes\n", "utf-8")
    script = [plan_reply(**MAKE_PLAN),
              call("bash", command="echo overwritten > notes.txt"),
              call("create", path="Makefile", file_text="test:\n\t@echo '1 passed, 0 failed'\n"),
              call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        proc = new_project("a make project", plain, model, agent_home, None, "--force")
    assert proc.returncode == 0, proc.stderr
    repo = git.Repo(plain)
    first = repo.head.commit.parents[0]
    assert first.message.startswith("Files in plain before new-project")
    assert first.tree["notes.txt"].data_stream.read() == b"my notes\n"

    # The home folder (here a fake one) is never taken whole, --force or not.
    home = tmp_path / "user"
    home.mkdir()
    (home / ".ssh").mkdir()
    with ScriptedModel([]) as model:
        proc = new_project("a make project", home, model, agent_home, None, "--force")
    assert proc.returncode == 2 and "is your home folder" in proc.stderr, proc.stderr
    assert not (home / ".git").exists()

    dirty = tmp_path / "dirty"
    work = git.Repo.init(dirty)
    (dirty / "a.py").write_text("x = 1\n", "utf-8")
    work.index.add(["a.py"])
    work.index.commit("mine", author=git.Actor("u", "u@localhost"),
                      committer=git.Actor("u", "u@localhost"))
    (dirty / "a.py").write_text("x = 2  # not committed\n", "utf-8")
    with ScriptedModel([]) as model:
        proc = new_project("a make project", dirty, model, agent_home, None, "--force")
    assert proc.returncode == 2, proc.stderr
    assert f"error: {dirty} has uncommitted changes; commit or stash them first" in proc.stderr
    assert model.requests == []
    assert (dirty / "a.py").read_text("utf-8") == "x = 2  # not committed\n"
    assert len(list(work.iter_commits())) == 1


def test_force_refuses_a_folder_with_files_git_ignores(tmp_path: Path, agent_home: Path):
    """A field trial lost a user's file for good: the folder's own .gitignore hid notes.txt
    from the commit made before the model wrote, and the model replaced it. Files git ignores
    cannot be committed, so --force refuses before the model is asked anything; caches and a
    virtualenv (nothing a user wrote) do not count."""
    folder = tmp_path / "p"
    (folder / "src").mkdir(parents=True)
    (folder / ".gitignore").write_text("*.txt\n.env\n", "utf-8")
    (folder / "notes.txt").write_text("my precious notes\n", "utf-8")
    (folder / ".env").write_text("TOKEN=x\n", "utf-8")
    (folder / "src" / "app.py").write_text("x = 1\n", "utf-8")
    with ScriptedModel([]) as model:
        proc = new_project("a greeter", folder, model, agent_home, None, "--force")
    assert proc.returncode == 2, proc.stderr
    assert f"error: {folder} holds files git ignores (.env, notes.txt)" in proc.stderr
    assert model.requests == [] and not (folder / ".git").exists()
    assert (folder / "notes.txt").read_text("utf-8") == "my precious notes\n"

    # The same in a clean repository of the user's (its .gitignore, its info/exclude).
    (folder / "notes.txt").unlink()
    (folder / ".env").unlink()
    repo = git.Repo.init(folder)
    repo.index.add([".gitignore", "src/app.py"])
    repo.index.commit("mine", author=git.Actor("u", "u@localhost"),
                      committer=git.Actor("u", "u@localhost"))
    (folder / ".git" / "info" / "exclude").write_text("secret.key\n", "utf-8")
    (folder / "secret.key").write_text("k\n", "utf-8")
    with ScriptedModel([]) as model:
        proc = new_project("a greeter", folder, model, agent_home, None, "--force")
    assert proc.returncode == 2 and "holds files git ignores (secret.key)" in proc.stderr, \
        proc.stderr
    (folder / "secret.key").unlink()

    # Caches and a virtualenv are no reason to refuse.
    (folder / ".gitignore").write_text("*.txt\n.env\n__pycache__/\n.venv/\n", "utf-8")
    repo.index.add([".gitignore"])
    repo.index.commit("ignore caches", author=git.Actor("u", "u@localhost"),
                      committer=git.Actor("u", "u@localhost"))
    (folder / ".dflash-agent").mkdir()  # an earlier run's scratch folder
    (folder / ".dflash-agent" / "out.txt").write_text("spilled\n", "utf-8")
    (folder / "src" / "__pycache__").mkdir()
    (folder / "src" / "__pycache__" / "app.cpython-311.pyc").write_bytes(b"\0")
    (folder / ".venv" / "bin").mkdir(parents=True)
    (folder / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n", "utf-8")
    script = [plan_reply(**MAKE_PLAN),
              call("create", path="Makefile", file_text="test:\n\t@echo '1 passed, 0 failed'\n"),
              call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        proc = new_project("a make project", folder, model, agent_home, None, "--force")
    assert proc.returncode == 0, proc.stderr


def test_a_folder_inside_a_repository_with_uncommitted_changes_there_is_refused(
        tmp_path: Path, agent_home: Path):
    """A field trial ran --force on `sub/` of a repository whose sub/notes.txt had an
    uncommitted edit: a repository was made inside the user's, and the edit lived on only
    in it. Refused now; a new folder inside a repository is made, and the user is told."""
    outer = tmp_path / "outer"
    (outer / "sub").mkdir(parents=True)
    (outer / "sub" / "notes.txt").write_text("v1\n", "utf-8")
    repo = git.Repo.init(outer)
    repo.index.add(["sub/notes.txt"])
    repo.index.commit("mine", author=git.Actor("u", "u@localhost"),
                      committer=git.Actor("u", "u@localhost"))
    (outer / "sub" / "notes.txt").write_text("v2, not committed\n", "utf-8")
    with ScriptedModel([]) as model:
        proc = new_project("a greeter", outer / "sub", model, agent_home, None, "--force")
    assert proc.returncode == 2, proc.stderr
    assert (f"error: {outer / 'sub'} has uncommitted changes in the git repository at {outer}"
            in proc.stderr)
    assert model.requests == [] and not (outer / "sub" / ".git").exists()

    script = [plan_reply(**MAKE_PLAN),
              call("create", path="Makefile", file_text="test:\n\t@echo '1 passed, 0 failed'\n"),
              call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        proc = new_project("a make project", outer / "fresh", model, agent_home)
    assert proc.returncode == 0, proc.stderr
    assert (f"{outer / 'fresh'} is inside the git repository at {outer}: the project gets a "
            "repository of its own there") in proc.stderr
    assert (outer / "fresh" / ".git").is_dir()


def test_a_dir_that_cannot_be_made_is_refused_before_the_model_is_asked(tmp_path: Path,
                                                                         agent_home: Path):
    """A field trial: --dir under a file, under /sys or /proc, or with a 300-character name
    was an internal error (exit 4) from mkdir after the plan, and the session read "no end
    recorded"."""
    (tmp_path / "afile").write_text("x\n", "utf-8")
    cases = [(tmp_path / "afile" / "sub", 2, f"cannot be made: {tmp_path / 'afile'} is a file"),
             (tmp_path / ("n" * 300), 2, "cannot be used: File name too long"),
             # Refused up front where access() knows (not for root), else when mkdir fails.
             (Path("/sys/dflash-agent-test"), None, "cannot be made: "),
             (Path("/proc/self/dflash-agent-test"), None, "cannot be made: ")]
    for target, code, said in cases:
        with ScriptedModel([plan_reply(**MAKE_PLAN)]) as model:
            proc = new_project("a make project", target, model, agent_home)
        assert proc.returncode in ((code,) if code else (2, 3)), (target, proc.stderr)
        assert said in proc.stderr and "internal error" not in proc.stderr, proc.stderr
        assert proc.returncode == 3 or model.requests == []
        assert not os.path.exists(target)  # Path.exists raises on a name too long


def test_a_folder_holding_only_a_fresh_git_init_is_empty(tmp_path: Path, agent_home: Path):
    """A field trial: `git init p && agent new-project ... --dir p` was refused with "p is not
    empty". A repository whose tracked files were deleted is still refused: that is work."""
    fresh = tmp_path / "fresh"
    git.Repo.init(fresh).close()
    script = [plan_reply(**MAKE_PLAN),
              call("create", path="Makefile", file_text="test:\n\t@echo '1 passed, 0 failed'\n"),
              call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        proc = new_project("a make project", fresh, model, agent_home)
    assert proc.returncode == 0, proc.stderr
    with git.Repo(fresh) as repo:
        assert "Makefile" in repo.head.commit.tree

    emptied = tmp_path / "emptied"
    with git.Repo.init(emptied) as repo:
        (emptied / "a.py").write_text("x = 1\n", "utf-8")
        repo.index.add(["a.py"])
        repo.index.commit("mine", author=git.Actor("u", "u@localhost"),
                          committer=git.Actor("u", "u@localhost"))
    (emptied / "a.py").unlink()
    with ScriptedModel([]) as model:
        proc = new_project("a make project", emptied, model, agent_home)
    assert proc.returncode == 2 and "has uncommitted changes" in proc.stderr, proc.stderr


def test_the_commit_subject_is_one_printable_line_whatever_the_description(tmp_path: Path):
    result = ProjectResult(tmp_path, "s", tmp_path / "log", LoopResult("", "done", 1),
                           TestReport("passed"))
    message = commit_message("a todo app\nwith\ttags \x1b[31mred\x1b[0m 日本語 \"q\"", result)
    assert message.splitlines()[0] == 'New project: a todo app with tags [31mred [0m 日本語 "q"'
    assert commit_message("x" * 500, result).splitlines()[0] == "New project: " + "x" * 60


def test_the_simple_recipes_module_can_always_be_imported():
    """Before, "2048 game" made 2048_game.py, which no test can import, and "class" or
    "json" a module that is a keyword or shadows the standard library."""
    assert module_name("a todo app") == "todo_app"
    assert module_name("2048 game") == "project_2048_game"
    assert module_name("class") == "project_class"
    assert module_name("json") == "project_json"
    assert module_name("日本語") == "new_project"


@pytest.mark.parametrize(("description", "module"), [
    ("a CLI that counts words, with tests", "cli_counts_words"),
    ("a CLI todo app with tests", "cli_todo_app"),
    ("A stack class WITH UNIT TESTS.", "stack_class"),
    ("a calculator, including a test suite", "calculator"),
    ("a word counter with tests and a README", "word_counter"),
    ("json with tests", "project_json"),  # the cut name is checked like any other
    ("a plugin that works with test runners", "plugin_works_test"),  # not a test clause
    ("the a", "the_a"),  # filler words alone are kept
    ("with tests", "tests"),  # nothing would be left: the description is kept
])
def test_the_simple_recipes_module_name_leaves_out_a_clause_asking_for_tests(
        description: str, module: str):
    """Before, "a CLI that counts words, with tests" made cli_counts_words_tests.py: the
    words telling the agent to write tests ended up in the module's name."""
    assert module_name(description) == module


def test_a_repository_the_model_broke_is_a_stated_error_not_a_crash(tmp_path: Path,
                                                                   agent_home: Path):
    """Before: exit 4, an internal error with a GitCommandError."""
    target = tmp_path / "broken"
    makefile = "test:\n\t@echo '1 passed, 0 failed'\n"
    script = [plan_reply(**MAKE_PLAN), call("create", path="Makefile", file_text=makefile),
              call("bash", command="rm -rf .git"), call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        proc = new_project("a make project", target, model, agent_home)
    assert proc.returncode == 3, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: the project's git repository could not take the commit (")
    assert last.endswith("uncommitted (tests: passed)")
    assert (target / "Makefile").read_text("utf-8") == makefile
    [session] = list_sessions()
    assert session.ended == "failed" and "could not take the commit" in session.end_detail


def test_a_slug_too_long_for_its_limit_drops_filler_words_before_real_ones():
    """Before, the simple recipe's module for "a CLI todo app with tests" (24 characters at
    most) was a_cli_todo_app_with: cut at the limit, "tests" went and "with" stayed."""
    assert slugify("a CLI todo app with tests", 24) == "cli-todo-app-tests"
    assert module_name("a CLI todo app for the team") == "cli_todo_app_team"
    assert slugify("a CLI todo app with tests") == "a-cli-todo-app-with-tests"  # fits whole
    text = "a web server for the notes of a team with a REST API and a SQLite database"
    assert slugify(text) == "web-server-notes-team-rest-api-sqlite"  # whole words only
    assert slugify("x" * 50, 24) == "x" * 24  # one word longer than the limit is cut
