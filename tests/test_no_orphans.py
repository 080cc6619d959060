"""No orphans: what a real ``agent run`` started (a background job, ``cmd &`` and ``setsid cmd
&`` children of a running command, an MCP stdio server) is gone seconds after ``kill -9`` of
the agent; and ``agent resume`` stops what a dead run of the same session left behind (and
nothing else)."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel, reply
from tools import reaper

AGENT = [sys.executable, "-m", "agent"]
ENV_SERVER = Path(__file__).parent / "mcp_servers" / "env_server.py"


def call(tool: str, **arguments: object) -> dict:
    return reply(json.dumps({"tool": tool, "arguments": arguments}))


def unique_sleep() -> str:
    """A ``sleep`` argument no other process on the machine uses, to find ours by cmdline."""
    return f"300.{secrets.randbelow(10**9):09d}1"


def pids_with(argument: str) -> list[int]:
    """Live (non-zombie) processes with ``argument`` in their command line."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["status"] != psutil.STATUS_ZOMBIE and argument in (proc.info["cmdline"]
                                                                        or []):
            found.append(proc.pid)
    return found


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_until(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    committed_repo(tmp_path / "repo", {"app.py": "x = 1\n"}).close()
    return tmp_path / "repo"


def agent_env(home: Path) -> dict[str, str]:
    return {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1"}


def test_everything_the_agent_started_dies_when_it_is_killed_with_sigkill(
        repo: Path, agent_home: Path, tmp_path: Path):
    job, child, detached, foreground = (unique_sleep() for _ in range(4))
    dump = tmp_path / "mcp-env.json"
    (agent_home / "config").mkdir(parents=True)
    (agent_home / "config" / "mcp.json").write_text(json.dumps({"mcpServers": {"envdump": {
        "command": sys.executable, "args": [str(ENV_SERVER)], "env": {"ENV_DUMP": str(dump)}}}}))
    script = [call("bash", command=f"sleep {job}", background=True),
              call("bash", command=f"sleep {child} & setsid sleep {detached} & "
                                   f"sleep {foreground}", timeout=600)]
    started: list[int] = []
    with ScriptedModel(script) as model:
        proc = subprocess.Popen([*AGENT, "run", "start things", "--approval", "full-auto",
                                 "--tool-protocol", "json", "--base-url", model.url],
                                cwd=repo, env=agent_env(agent_home), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            assert wait_until(lambda: all(pids_with(s) for s in (job, child, detached,
                                                                 foreground)), 120), \
                "the commands never all ran"
            started = [pid for s in (job, child, detached, foreground) for pid in pids_with(s)]
            started.append(json.loads(dump.read_text())["pid"])
            assert all(alive(pid) for pid in started)
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stderr.close()
    survivors = lambda: [pid for pid in started if alive(pid)]  # noqa: E731
    try:
        assert wait_until(lambda: not survivors(), 10), \
            [psutil.Process(p).cmdline() for p in survivors()]
    finally:
        for pid in survivors():
            os.kill(pid, signal.SIGKILL)


def _session_of(stderr: str) -> str:
    match = re.search(r"^session (\S+) \(undo", stderr, re.MULTILINE)
    assert match, stderr
    return match.group(1)


def _sleep_with_marker(marker: str, argument: str) -> subprocess.Popen:
    env = {**os.environ, reaper.OWNER_ENV: marker}
    return subprocess.Popen(["sleep", argument], env=env, start_new_session=True)


def test_resume_stops_what_a_dead_run_of_the_session_left_running(repo: Path,
                                                                   agent_home: Path):
    # A file written: a final answer stands only after the task changed a file or ran a
    # command (agent/finish.py).
    script = [call("create", path="made.txt", file_text="made\n"),
              call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        first = subprocess.run([*AGENT, "run", "x", "--tool-protocol", "json", "--base-url",
                                model.url], cwd=repo, env=agent_env(agent_home),
                               capture_output=True, text=True, timeout=120,
                               stdin=subprocess.DEVNULL)
    assert first.returncode == 0, first.stderr
    session = _session_of(first.stderr)
    dead_owner = "999999999-1"  # no such pid: the run that started it is gone
    leftover = _sleep_with_marker(f"{dead_owner}/{session}/bash-3", unique_sleep())
    other_session = _sleep_with_marker(f"{dead_owner}/20000101-000000-abcdef/bash-1",
                                       unique_sleep())
    live_owner = _sleep_with_marker(f"{reaper.owner_id()}/{session}/bash-1", unique_sleep())
    try:
        assert wait_until(lambda: all(alive(p.pid) for p in (leftover, other_session,
                                                             live_owner)), 10)
        with ScriptedModel([]) as model:
            resumed = subprocess.run([*AGENT, "resume", session, "--base-url", model.url],
                                     cwd=repo, env=agent_env(agent_home), capture_output=True,
                                     text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert resumed.returncode == 0, resumed.stderr
        assert f"stopped 1 process left running by the previous run of session {session}" \
            in resumed.stderr.splitlines(), resumed.stderr
        assert leftover.wait(10) is not None
        assert other_session.poll() is None and live_owner.poll() is None
    finally:
        for p in (leftover, other_session, live_owner):
            if p.poll() is None:
                p.kill()
            p.wait()
