"""The CLI as a user runs it: a real `agent` process."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import git
import pytest

from agent.sessions.log import read_events

AGENT = [sys.executable, "-m", "agent"]


def run(*args: str, home: Path, cwd: Path | None = None, timeout: float = 600,
        **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1",
                "COLUMNS": "200", **env}
    return subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=full_env, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("args", [[], ["new-project"], ["run"], ["chat"], ["resume"],
                                  ["sessions"], ["undo"], ["diff"], ["backend"],
                                  ["backend", "build"], ["backend", "download"],
                                  ["backend", "up"], ["backend", "down"], ["backend", "status"]])
def test_every_command_has_clear_help(args: list[str], agent_home: Path):
    proc = run(*args, "--help", home=agent_home)
    assert proc.returncode == 0, proc.stderr
    assert "Usage: agent" in proc.stdout
    assert len(proc.stdout.strip().splitlines()) >= 4


def test_root_help_documents_exit_codes(agent_home: Path):
    out = " ".join(run("--help", home=agent_home).stdout.split())  # however it wraps
    assert "Exit codes: 0 success" in out and "130 interrupted" in out


@pytest.mark.parametrize("command", ["chat", "resume"])
def test_chat_help_says_leaving_is_success(command: str, agent_home: Path):
    """chat and resume exit 0 when the user leaves, whatever the tasks did; their help said
    "1 the task did not finish", which only run and new-project do."""
    out = " ".join(run(command, "--help", home=agent_home).stdout.split())
    assert "Exit codes: 0 you left the chat (/exit, Ctrl-D), whatever its tasks did" in out
    assert "1 the task did not finish" not in out and "130 interrupted" in out


def test_new_project_refuses_a_non_empty_directory_and_touches_nothing(agent_home: Path,
                                                                      tmp_path: Path):
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    proc = run("new-project", "a todo app", "--dir", str(target), home=agent_home)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and "not empty" in lines[0] and "--force" in lines[0]
    assert len(lines) == 1 and not (agent_home / "state" / "crashes").exists()  # a usage error
    assert sorted(p.name for p in target.iterdir()) == ["keep.txt"]


def test_debug_shows_the_traceback(agent_home: Path, tmp_path: Path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "x").write_text("x")
    proc = run("--debug", "new-project", "x", "--dir", str(tmp_path / "busy"), home=agent_home)
    assert proc.returncode == 2 and "Traceback (most recent call last)" in proc.stderr


def test_broken_config_is_one_clear_line(agent_home: Path):
    (agent_home / "config").mkdir(parents=True)
    (agent_home / "config" / "config.toml").write_text("preset = \n")
    proc = run("backend", "up", home=agent_home)
    assert proc.returncode == 3
    assert proc.stderr.startswith("error: ") and "config.toml: not valid TOML" in proc.stderr


def test_unknown_preset_is_reported(agent_home: Path):
    proc = run("backend", "download", "no-such-preset", home=agent_home)
    assert proc.returncode == 2 and "unknown preset 'no-such-preset'" in proc.stderr


def test_bad_flag_value_is_a_usage_error(agent_home: Path):
    proc = run("new-project", "x", "--max-steps", "many", home=agent_home)
    assert proc.returncode == 2 and "Invalid value for '--max-steps'" in proc.stderr


def test_status_and_down_with_nothing_running(agent_home: Path):
    assert json.loads(run("backend", "status", "--json", home=agent_home).stdout) == []
    proc = run("backend", "down", home=agent_home)
    assert proc.returncode == 0 and "no managed server is running" in proc.stdout


def test_backend_build_registers_an_existing_server_binary(engine, agent_home: Path):
    proc = run("backend", "build", "--server-bin", str(engine.binary), home=agent_home)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("engine system-")


def test_backend_up_status_down_through_the_cli(engine, smollm2, shared_home: Path,
                                                tmp_path: Path):
    # Same engine and model, private server state: a fresh home with the binary registered
    # and a preset pointing at the extracted model.
    home = tmp_path / "home"
    assert run("backend", "build", "--server-bin", str(engine.binary), home=home).returncode == 0
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "presets.toml").write_text(
        f'[tiny]\nmodel = "{smollm2}"\nprofile = "ngram"\nctx_size = 1024\n')
    up = run("backend", "up", "--preset", "tiny", home=home)
    assert up.returncode == 0, up.stderr
    assert up.stdout.startswith("started llama-server")
    again = run("backend", "up", "--preset", "tiny", home=home)
    assert again.stdout.startswith("reusing llama-server")
    # A session on the running server says one true thing (field case 21: it said "starting
    # the server", then "reusing" it).
    (tmp_path / "work").mkdir()
    task = run("run", "say hi", "--preset", "tiny", "--max-steps", "1", "--no-git", "--repo",
               str(tmp_path / "work"), home=home)
    said = task.stdout + task.stderr
    assert "reusing llama-server" in said and "starting the" not in said, said
    status = json.loads(run("backend", "status", "--json", home=home).stdout)
    assert len(status) == 1 and status[0]["n_ctx"] == 1024 and status[0]["profile"] == "ngram"
    down = run("backend", "down", "--all", home=home)
    assert down.returncode == 0 and "stopped llama-server" in down.stdout
    assert json.loads(run("backend", "status", "--json", home=home).stdout) == []


def test_new_project_says_the_managed_server_it_leaves_running(engine, smollm2, tmp_path: Path):
    """After new-project the managed server keeps running (the next command reuses it): the
    summary says so, with its pid and how to stop it, in text and in --json."""
    import psutil

    home = tmp_path / "home"
    assert run("backend", "build", "--server-bin", str(engine.binary), home=home).returncode == 0
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "presets.toml").write_text(
        f'[tiny]\nmodel = "{smollm2}"\nprofile = "baseline"\nctx_size = 4096\n')
    args = ("--preset", "tiny", "--recipe", "simple", "--max-steps", "1")
    try:
        text = run("new-project", "add two numbers", "--dir", str(tmp_path / "p1"), *args,
                   home=home)
        as_json = run("new-project", "add two numbers", "--dir", str(tmp_path / "p2"), *args,
                      "--json", home=home)
        # `run` says it too (a field trial: nothing told the user the model held its memory).
        task = run("run", "say hi", "--preset", "tiny", "--max-steps", "1", "--no-git",
                   "--repo", str(tmp_path / "p1"), home=home)
        [state] = json.loads(run("backend", "status", "--json", home=home).stdout)
    finally:
        down = run("backend", "down", "--all", home=home)
    assert text.returncode in (0, 1), text.stderr
    line = next((x for x in text.stdout.splitlines() if x.startswith("Server:")), None)
    assert line == (f"Server: llama-server pid {state['pid']} is still running at "
                    f"{state['url']} (the next command reuses it); stop it with "
                    "`agent backend down`")
    assert line in task.stderr.splitlines(), task.stderr
    summary = json.loads(as_json.stdout.splitlines()[-1])
    assert summary["type"] == "summary"
    assert summary["server"] == {"pid": state["pid"], "url": state["url"],
                                 "stop": "agent backend down"}
    assert f"stopped llama-server pid {state['pid']}" in down.stdout
    assert not psutil.pid_exists(state["pid"]) or \
        psutil.Process(state["pid"]).status() == psutil.STATUS_ZOMBIE


E2E_ROOT = Path(tempfile.gettempdir()) / "dflash-agent-e2e"
"""Where the end-to-end new-project runs: always the same path, because greedy SmolLM2 reads
the project's path in its prompt, and under pytest's numbered folders its reply changed with
the number (CI failed at pytest-132 with no file written; pytest-0 passed)."""


def test_new_project_end_to_end_on_smollm2(engine, smollm2, shared_home: Path):
    """The README's main job on the suite's preset (tests/conftest.py; the default coder
    model's run is in tests/test_real_coder.py): real server, real SmolLM2, a commit holding a
    model-written file, a session log with per-turn timings."""
    shutil.rmtree(E2E_ROOT, ignore_errors=True)
    E2E_ROOT.mkdir()
    try:
        proc = run("new-project", "a python function that adds two numbers", "--max-steps",
                   "6", home=shared_home, cwd=E2E_ROOT)
    finally:
        run("backend", "down", "--all", home=shared_home)
    assert proc.returncode in (0, 1), proc.stderr
    project = E2E_ROOT / "a-python-function-that-adds-two-numbers"
    repo = git.Repo(project)
    committed = {item.path for item in repo.head.commit.tree.traverse()}
    assert ".gitignore" in committed
    assert "Tests (run by dflash-agent):" in proc.stdout
    log = Path(proc.stdout.split("session log:")[1].split()[0])
    events = read_events(log)
    written = {e.arguments.get("path") for e in events
               if e.type == "tool_call" and e.name in {"create", "str_replace"}}
    results = {e.call_id: e for e in events if e.type == "tool_result"}
    calls_ok = [e for e in events if e.type == "tool_call" and e.name in {"create", "str_replace"}
                and not results[e.call_id].is_error]
    assert calls_ok, "the model issued no successful create/str_replace"
    assert written & committed
    turns = [e for e in events if e.type == "model_turn"]
    assert turns and all(t.timings is not None and t.timings.predicted_n for t in turns)
    assert events[0].type == "session_start" and events[-2].type == "final_answer"
    checked = events[-1]
    assert checked.type == "project_checked" and checked.commit == repo.head.commit.hexsha
    assert f"Tests (run by dflash-agent): {checked.tests}" in proc.stdout
    # The 135M model gets the simple recipe, chosen by its size and said in output and log;
    # its tests run with pytest in the project's own .venv.
    assert "Recipe: simple (the model has 0.13 B parameters" in proc.stdout
    [plan] = [e for e in events if e.type == "project_plan"]
    assert (plan.recipe, plan.status, plan.plan["toolchain"]) == ("simple", "accepted", "python")
    assert checked.recipe == "simple"
    assert checked.runner.startswith(".venv/bin/python -m pytest")
    assert not any(p.startswith(".venv/") for p in committed)


def test_version_is_printed(agent_home: Path):
    proc = run("--version", home=agent_home)
    assert proc.returncode == 0 and proc.stdout.startswith("dflash-agent ")


def test_empty_description_is_a_usage_error(agent_home: Path, tmp_path: Path):
    proc = run("new-project", "   ", "--dir", str(tmp_path / "p"), home=agent_home)
    assert proc.returncode == 2 and "description is empty" in proc.stderr
    assert not (tmp_path / "p").exists()


def test_an_unreachable_base_url_fails_before_anything_is_written(agent_home: Path,
                                                                  tmp_path: Path):
    target = tmp_path / "proj"
    proc = run("new-project", "hello", "--dir", str(target), "--base-url",
               "http://127.0.0.1:9", home=agent_home)
    assert proc.returncode == 3
    assert "no server answers at http://127.0.0.1:9" in proc.stderr
    assert "drop --base-url" in proc.stderr
    assert not target.exists()  # a retry is not blocked by a half-made directory


def test_the_dflash_profile_without_a_draft_is_a_clear_error(engine, agent_home: Path):
    assert run("backend", "build", "--server-bin", str(engine.binary),
               home=agent_home).returncode == 0
    proc = run("backend", "up", "--profile", "dflash", home=agent_home)
    # Bad usage, as with --print-cmd (39fcf33: it was 3 here, after the engine was built).
    assert proc.returncode == 2
    assert "needs a draft model" in proc.stderr and "internal error" not in proc.stderr


def test_crash_logs_never_overwrite_each_other(agent_home: Path):
    from agent.errors import write_crash_log

    paths = []
    for n in range(3):  # within one second: the time stamp alone would collide
        try:
            raise RuntimeError(f"crash {n}")
        except RuntimeError as exc:
            paths.append(Path(write_crash_log(exc)))
    assert len(set(paths)) == 3
    assert [f"RuntimeError: crash {n}" in p.read_text() for n, p in enumerate(paths)] == [True] * 3
    assert all("Traceback" in p.read_text() for p in paths)


def test_output_is_not_hard_wrapped_when_piped(agent_home: Path, tmp_path: Path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    (deep / "x").write_text("x")
    proc = run("new-project", "x", "--dir", str(deep), home=agent_home, COLUMNS="80")
    first = proc.stderr.splitlines()[0]
    assert str(deep) in first and "not empty" in first


def test_up_print_cmd_shows_the_exact_command_without_starting(engine, smollm2,
                                                               tmp_path: Path):
    home = tmp_path / "home"
    assert run("backend", "build", "--server-bin", str(engine.binary), home=home).returncode == 0
    (home / "config").mkdir(parents=True, exist_ok=True)
    (home / "config" / "presets.toml").write_text(f'[tiny]\nmodel = "{smollm2}"\n')
    proc = run("backend", "up", "--preset", "tiny", "--profile", "ngram", "--print-cmd",
               "--idle-timeout", "60", home=home)
    assert proc.returncode == 0, proc.stderr
    cmd = proc.stdout.strip()
    assert cmd.startswith(str(engine.binary)) and f"-m {smollm2}" in cmd
    assert "--spec-type ngram-mod" in cmd and "--sleep-idle-seconds 60" in cmd
    assert json.loads(run("backend", "status", "--json", home=home).stdout) == []


def test_print_cmd_with_a_busy_port_says_the_launch_picks_another(agent_home: Path):
    """Issue 28 item 8: the command showed the busy port with no word that `up` would not use
    it."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run("backend", "up", "--preset", "gemma4-31b-dflash", "--print-cmd", "--port",
                   str(port), home=agent_home, HF_ENDPOINT="http://127.0.0.1:9")
    assert proc.returncode == 0, proc.stderr
    assert f"--port {port}" in proc.stdout
    assert f"note: port {port} is in use: `up` would pick a free port instead" in proc.stderr
    assert "is in use" not in run("backend", "up", "--preset", "gemma4-31b-dflash",
                                  "--print-cmd", "--port", str(port), home=agent_home,
                                  HF_ENDPOINT="http://127.0.0.1:9").stderr


def test_the_cli_starts_without_git_on_path(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-m", "agent", "--help"], capture_output=True,
                          text=True, timeout=120, env={"PATH": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert "new-project" in proc.stdout


def test_a_repo_task_without_git_installed_says_so(tmp_path: Path):
    repo = git.Repo.init(tmp_path / "r")
    nogit = tmp_path / "bin"
    nogit.mkdir()
    proc = subprocess.run([sys.executable, "-m", "agent", "run", "x", "--base-url",
                           "http://127.0.0.1:9"], capture_output=True, text=True, timeout=120,
                          cwd=repo.working_tree_dir,
                          env={"PATH": str(nogit), "DFLASH_AGENT_HOME": str(tmp_path / "h")})
    assert proc.returncode == 3, proc.stderr
    assert "git is not installed" in proc.stderr and "--no-git" in proc.stderr


def test_print_cmd_needs_no_engine_and_downloads_nothing(agent_home: Path):
    proc = run("backend", "up", "--preset", "gemma4-31b-dflash", "--print-cmd", home=agent_home,
               HF_ENDPOINT="http://127.0.0.1:9")  # any network access would fail
    assert proc.returncode == 0, proc.stderr
    cmd = proc.stdout.strip()
    assert cmd.startswith("llama-server -m hf://unsloth/gemma-4-31B-it-GGUF/")
    assert "--spec-draft-model hf://Anbeeld/gemma-4-31B-it-DFlash-GGUF/" in cmd
    assert "--spec-type draft-dflash --spec-draft-n-max 15" in cmd and "-ngl all" in cmd
    assert "no engine is built yet" in proc.stderr and "is not downloaded yet" in proc.stderr
    assert not (agent_home / "cache" / "engines").exists() or \
        not any((agent_home / "cache" / "engines").iterdir())
