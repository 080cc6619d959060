"""What a first-time user sees when something goes wrong: exit codes, one-line reasons for
every stop, crash logs only where a traceback helps, honest undo lines and readable help.
A real `agent` process; the scripted model on loopback stands in for the server."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.sessions.checkpoints.plumbing import RepoStateError, open_repo
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel, reply

VENV_BIN = Path(sys.executable).parent

AGENT = [sys.executable, "-m", "agent"]


def agent(*args: str, home: Path, cwd: Path | None = None,
          timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=env, stdin=subprocess.DEVNULL)


def crash_logs(home: Path) -> list[Path]:
    folder = home / "state" / "crashes"
    return sorted(folder.iterdir()) if folder.is_dir() else []


@pytest.mark.parametrize(("flag", "value"), [("--approval", "yolo"), ("--profile", "turbo"),
                                             ("--ctx-size", "-5"), ("--max-steps", "0"),
                                             ("--tool-protocol", "foo"),
                                             ("--max-time", "0")])
def test_a_bad_flag_value_is_bad_usage(flag: str, value: str, agent_home: Path,
                                       tmp_path: Path):
    proc = agent("run", "x", flag, value, home=agent_home, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"error: {flag} ") and ": Input should be" in first, first


def test_the_same_bad_value_from_config_or_environment_stays_a_config_error(
        agent_home: Path, tmp_path: Path):
    (agent_home / "config").mkdir(parents=True)
    (agent_home / "config" / "config.toml").write_text('approval = "yolo"\n')
    proc = agent("run", "x", home=agent_home, cwd=tmp_path)
    assert proc.returncode == 3 and "config.toml: approval: Input should be" in proc.stderr
    (agent_home / "config" / "config.toml").write_text("")
    env_proc = subprocess.run([*AGENT, "run", "x"], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL,
                              env={**os.environ, "DFLASH_AGENT_HOME": str(agent_home),
                                   "DFLASH_AGENT_MAX_STEPS": "0"})
    assert env_proc.returncode == 3 and "DFLASH_AGENT_MAX_STEPS: Input should be" \
        in env_proc.stderr


@pytest.mark.parametrize("args", [["run", "   "], ["undo", "no-such-session"],
                                  ["diff", "no-such-session"],
                                  ["backend", "download", "no-such-preset"],
                                  ["run", "x", "--max-steps", "0"]])
def test_a_users_mistake_is_one_line_without_a_crash_log(args: list[str], agent_home: Path,
                                                         tmp_path: Path):
    proc = agent(*args, home=agent_home, cwd=tmp_path)
    assert proc.returncode in (2, 3)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert crash_logs(agent_home) == []


def test_a_file_that_is_not_gguf_is_one_error_line_without_a_crash_log(agent_home: Path,
                                                                      tmp_path: Path):
    # Field case 22: a wrong input file is an ordinary mistake, not a crash of the product.
    (tmp_path / "bad.gguf").write_bytes(b"not a gguf")
    proc = agent("backend", "convert-draft", str(tmp_path / "bad.gguf"),
                 str(tmp_path / "out.gguf"), home=agent_home)
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a readable GGUF file" in lines[0], proc.stderr
    assert crash_logs(agent_home) == [] and not (tmp_path / "out.gguf").exists()


@pytest.mark.parametrize("command", ["run", "chat"])
def test_a_repo_that_does_not_exist_is_named_as_such(command: str, agent_home: Path,
                                                     tmp_path: Path):
    missing = tmp_path / "nonexistent"
    args = ["run", "x"] if command == "run" else ["chat"]
    proc = agent(*args, "--repo", str(missing), home=agent_home, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "does not exist" in line and str(missing) in line and "git init" not in line
    assert not missing.exists()
    (tmp_path / "afile").write_text("x")
    proc = agent(*args, "--repo", str(tmp_path / "afile"), home=agent_home, cwd=tmp_path)
    assert proc.returncode == 2 and "is not a directory" in proc.stderr


def test_open_repo_on_a_missing_folder_says_it_is_missing(tmp_path: Path):
    # The path of `agent resume` and the MCP server, where no --repo flag is involved.
    with pytest.raises(RepoStateError, match="does not exist"):
        open_repo(tmp_path / "gone")


def call(tool: str, **arguments: object) -> dict:
    return reply(json.dumps({"tool": tool, "arguments": arguments}))


WORK = call("bash", command="true")
"""A command that succeeds (full-auto): a final answer stands only after the task did some
work (agent/finish.py)."""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    committed_repo(tmp_path / "repo", {"app.py": "x = 1\n"}).close()
    return tmp_path / "repo"


@pytest.mark.parametrize(("flags", "script", "expected"), [
    (["--max-steps", "1"], [call("view", path="app.py")],
     ["step limit (1 model calls)", "raise --max-steps"]),
    (["--max-time", "0.001"], [call("view", path="app.py")] * 2,
     ["time limit ran out", "raise --max-time"]),
    ([], [call("view", path="app.py")] * 3,
     ["view was called 3 times in a row", "rephrase the task"]),
    ([], [reply("{not json")] * 3,
     ["stopped after 3 malformed replies", "--tool-protocol json"]),
])
def test_every_stop_says_why_and_what_to_do(flags: list[str], script: list[dict],
                                            expected: list[str], repo: Path,
                                            agent_home: Path):
    with ScriptedModel(script) as model:
        proc = agent("run", "look", "--tool-protocol", "json", "--base-url", model.url, *flags,
                     home=agent_home, cwd=repo)
    assert proc.returncode == 1, proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if expected[1] in x]
    assert all(part in line for part in expected), line


def test_ctrl_c_says_interrupted(repo: Path, agent_home: Path):
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1"}
    with ScriptedModel([reply("slow", delay=60)]) as model:
        proc = subprocess.Popen([*AGENT, "run", "wait", "--base-url", model.url], cwd=repo,
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not model.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert model.requests, "the agent never asked the model"
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "interrupted (Ctrl-C)" in stderr


def test_a_failed_mcp_tool_call_shows_the_servers_message(repo: Path, agent_home: Path):
    (agent_home / "config").mkdir(parents=True)
    (agent_home / "config" / "mcp.json").write_text(json.dumps(
        {"mcpServers": {"time": {"command": str(VENV_BIN / "mcp-server-time")}}}))
    script = [call("time__get_current_time", timezone="Mars/Olympus_Mons"), WORK,
              call("final_answer", text="no such zone")]
    with ScriptedModel(script) as model:
        proc = agent("run", "what time is it on Mars", "--tool-protocol", "json",
                     "--approval", "full-auto", "--base-url", model.url, home=agent_home,
                     cwd=repo)
    assert proc.returncode == 0, proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if "✗" in x]
    assert "Mars/Olympus_Mons" in line, proc.stderr


def test_sessions_lists_a_new_project_by_its_description_with_one_task(agent_home: Path,
                                                                       tmp_path: Path):
    # A test that passes, checked: no failing or missing test goes back to the model, and a
    # final answer stands only after the task's own work (agent/finish.py).
    script = [call("create", path="tests/test_todo_app.py",
                   file_text="def test_nothing_yet():\n    assert True\n"),
              WORK, call("final_answer", text="scaffolded")]
    with ScriptedModel(script) as model:
        proc = agent("new-project", "a todo app", "--dir", str(tmp_path / "proj"),
                     "--base-url", model.url, "--tool-protocol", "json", home=agent_home,
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [entry] = json.loads(agent("sessions", "--json", home=agent_home, cwd=tmp_path).stdout)
    assert (entry["task"], entry["tasks"], entry["steps"]) == ("a todo app", 1, 3)
    line = agent("sessions", home=agent_home, cwd=tmp_path).stdout
    assert "tasks 1  steps 3" in line and "'a todo app'" in line
    assert "Create a new project" not in line


def test_undo_and_diff_of_a_new_project_say_what_it_was(agent_home: Path, tmp_path: Path):
    """They said the session "did not run in a git repo", of a project it made with git."""
    with ScriptedModel([call("final_answer", text="scaffolded")]) as model:
        agent("new-project", "a todo app", "--dir", str(tmp_path / "proj"), "--base-url",
              model.url, "--tool-protocol", "json", home=agent_home, cwd=tmp_path)
    [entry] = json.loads(agent("sessions", "--json", home=agent_home, cwd=tmp_path).stdout)
    for command in ("undo", "diff"):
        proc = agent(command, entry["id"], home=agent_home, cwd=tmp_path)
        assert proc.returncode == 3, proc.stderr
        assert f"created the project in {tmp_path / 'proj'}: there is no state before it" \
            in proc.stderr and "remove the folder to undo it" in proc.stderr, proc.stderr
    assert (tmp_path / "proj" / ".git").is_dir()


def test_new_project_indents_the_test_runs_last_lines_under_its_tests_line(agent_home: Path,
                                                                           tmp_path: Path):
    """Before, pytest's "no tests ran in 0.01s" stood at the margin under "Tests (run by
    dflash-agent): no tests (...)", read as a line of the summary's own."""
    from agent.newproject.work import MAX_FIX_ROUNDS

    # A run that found no test goes back to the model (MAX_FIX_ROUNDS times); each round
    # ends with a command and a final answer, which stands only after the round's own work.
    script = [WORK, call("final_answer", text="scaffolded")] * (1 + MAX_FIX_ROUNDS)
    with ScriptedModel(script) as model:
        proc = agent("new-project", "a todo app", "--dir", str(tmp_path / "proj"),
                     "--base-url", model.url, "--tool-protocol", "json", home=agent_home,
                     cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # the scripted project has no tests
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Tests (run by"))
    assert lines[at].startswith("Tests (run by dflash-agent): no tests ("), proc.stdout
    assert lines[at + 1].startswith("    no tests ran in "), proc.stdout
    assert lines[at + 2].startswith("Steps: "), proc.stdout


def _help_texts() -> dict[str, str]:
    """Every command's --help text, rendered in-process from the real command tree."""
    import typer

    from agent.cli.app import app

    out: dict[str, str] = {}

    def walk(command: Any, path: list[str], parent: typer.Context | None) -> None:
        ctx = typer.Context(command, info_name=path[-1], parent=parent)
        out[" ".join(path)] = command.get_help(ctx)
        if hasattr(command, "list_commands"):  # a group (typer vendors its own click)
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), [*path, name], ctx)

    walk(typer.main.get_command(app), ["agent"], None)
    return out


def test_no_option_shows_an_internal_type_name():
    texts = _help_texts()
    assert len(texts) > 20
    for name, text in texts.items():
        section = text.split("\nOptions:\n", 1)[-1].split("\nCommands:\n")[0]
        options = [line for line in section.splitlines() if line.lstrip().startswith("-")]
        bad = [line for line in options if "list[" in line or "[Path]" in line]
        assert not bad, f"{name}: {bad}"


@pytest.mark.parametrize(("command", "expected"), [
    (["run"], ["--skill NAME", "--repo DIR"]), (["new-project"], ["--skill NAME", "--dir DIR"]),
    (["mcp", "serve"], ["--root DIR"]), (["mcp", "install"], ["--root DIR"]),
    (["mcp", "add"], ["--header KEY=VALUE", "--env KEY=VALUE", "--repo DIR"]),
    (["skills", "list"], ["--repo DIR"])])
def test_help_names_what_an_option_takes(command: list[str], expected: list[str],
                                         agent_home: Path):
    proc = agent(*command, "--help", home=agent_home)
    assert proc.returncode == 0, proc.stderr
    for metavar in expected:
        assert metavar in proc.stdout, proc.stdout


@pytest.mark.parametrize("command", [["backend", "bench"], ["backend", "calibrate"]])
def test_an_output_path_that_cannot_be_written_is_refused_before_measuring(
        command: list[str], agent_home: Path, tmp_path: Path):
    """A field trial: `bench --json afile/x.json` measured for minutes, then failed to write
    and kept nothing. The paths are checked first (exit 2, nothing built or started)."""
    (tmp_path / "afile").write_text("x\n")
    for flag, path, said in (("--json", tmp_path / "afile" / "x.json", "is a file"),
                             ("--json", tmp_path, "is a folder"),
                             ("--plot", tmp_path / "afile" / "x.png", "is a file")):
        proc = agent(*command, flag, str(path), home=agent_home, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert f"error: {flag} {path}: " in proc.stderr and said in proc.stderr
        assert not (agent_home / "cache" / "engines").exists()  # nothing was built


def test_an_empty_session_id_is_refused_not_taken_for_the_latest(repo: Path, agent_home: Path):
    """A field trial: `agent resume ""` (an unset variable) resumed the latest session."""
    # A file written (auto-edit runs no command here): a final answer stands only after the
    # task changed a file or ran a command (agent/finish.py).
    script = [call("create", path="hi.txt", file_text="hi\n"), call("final_answer", text="ok")]
    with ScriptedModel(script) as model:
        assert agent("run", "hi", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo).returncode == 0
    for command in ("resume", "undo", "diff"):
        proc = agent(command, " ", home=agent_home, cwd=repo)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("error: the session id is empty"), proc.stderr


def test_a_profile_the_preset_cannot_run_is_refused_before_the_engine_is_built(
        agent_home: Path, tmp_path: Path):
    """A field trial: `backend up --profile dflash` on a preset without a draft was exit 2 with
    --print-cmd, and exit 3 after minutes of building the engine without it."""
    for extra in ([], ["--print-cmd"]):
        proc = agent("backend", "up", "--preset", "smollm2-135m", "--profile", "dflash", *extra,
                     home=agent_home, cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert "the dflash profile needs a draft model" in proc.stderr
        assert not (agent_home / "cache" / "engines").exists()
    # A session too, with the same exit (it was 3 where `backend up` said 2).
    proc = agent("run", "x", "--no-git", "--preset", "smollm2-135m", "--profile", "dflash",
                 home=agent_home, cwd=tmp_path)
    assert proc.returncode == 2 and "the dflash profile needs a draft model" in proc.stderr
    assert not (agent_home / "cache" / "engines").exists()


def test_sizes_past_what_llama_cpp_counts_are_refused(agent_home: Path, tmp_path: Path):
    """A field trial: `up --ctx-size 3000000000 --force --print-cmd` printed `-c 3000000000`
    (past llama.cpp's 32-bit counts), and `--parallel 100000` was taken."""
    for args in (["--ctx-size", "3000000000"], ["--parallel", "100000"]):
        proc = agent("backend", "up", *args, "--force", "--print-cmd", home=agent_home,
                     cwd=tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert args[0] in proc.stderr and "-c 3000000000" not in proc.stdout
