"""Field case 23: `agent sessions` says how each session ended (done, stopped and why,
interrupted, failed, killed), from real `agent run` processes against the scripted model; a
session whose log is torn or damaged still lists, as unknown, never with a traceback."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import time
from pathlib import Path

from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel, error_reply, reply
from tests.test_cli_ux import AGENT, agent, call

DONE = [call("bash", command="true"), call("final_answer", text="ok")]
"""A task that ends done: a final answer stands only after the task changed a file or ran a
command (agent/finish.py)."""


def _run(repo: Path, home: Path, task: str, script: list[dict], *flags: str) -> int:
    with ScriptedModel(script) as model:
        proc = agent("run", task, "--tool-protocol", "json", "--approval", "full-auto",
                     "--base-url", model.url, *flags, home=home, cwd=repo)
    return proc.returncode


def _signalled(repo: Path, home: Path, task: str, sig: signal.Signals) -> tuple[int, str]:
    """An `agent run` that gets ``sig`` while it waits for the model's first reply: its exit
    status and standard error."""
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1"}
    with ScriptedModel([reply("slow", delay=60)]) as model:
        proc = subprocess.Popen([*AGENT, "run", task, "--base-url", model.url], cwd=repo,
                                env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not model.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert model.requests, "the agent never asked the model"
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    return proc.returncode, stderr


def test_sessions_say_how_each_one_ended(tmp_path: Path, agent_home: Path):
    repo = tmp_path / "repo"
    committed_repo(repo, {"app.py": "x = 1\n"}).close()
    assert _run(repo, agent_home, "finish", DONE) == 0
    assert _run(repo, agent_home, "loop", [call("view", path="app.py")],
                "--max-steps", "1") == 1
    assert _run(repo, agent_home, "broken server", [error_reply(
        500, {"code": 500, "message": "model exploded", "type": "server_error"})]) == 3
    _signalled(repo, agent_home, "ctrl-c", signal.SIGINT)
    _signalled(repo, agent_home, "killed", signal.SIGKILL)
    # `timeout` and a closed terminal: the same clean end as Ctrl-C (they killed the process
    # at once, and the session read "no end recorded").
    for task, sig in (("terminated", signal.SIGTERM), ("hung up", signal.SIGHUP)):
        code, stderr = _signalled(repo, agent_home, task, sig)
        assert code == 130 and f"interrupted ({sig.name})" in stderr, (code, stderr)
        assert "Traceback" not in stderr
    listed = agent("sessions", "--json", home=agent_home, cwd=repo)
    assert listed.returncode == 0, listed.stderr
    ended = {s["task"]: (s["ended"], s["end_detail"]) for s in json.loads(listed.stdout)}
    assert ended["finish"] == ("done", "done")
    assert ended["loop"] == ("stopped", "stopped: the step limit ran out")
    assert ended["broken server"][0] == "failed"
    assert "model exploded" in ended["broken server"][1]
    assert ended["ctrl-c"] == ("interrupted", "interrupted (Ctrl-C)")
    assert ended["killed"] == ("no_end", "no end recorded (killed, or still running)")
    assert ended["terminated"] == ("interrupted", "interrupted (SIGTERM)")
    assert ended["hung up"] == ("interrupted", "interrupted (SIGHUP)")
    text = agent("sessions", home=agent_home, cwd=repo).stdout
    line = next(x for x in text.splitlines() if "'loop'" in x)
    assert "stopped: the step limit ran out" in line


def test_a_closed_terminal_ends_the_session_like_ctrl_c(tmp_path: Path, agent_home: Path):
    """The terminal of an `agent run` goes away (a closed window, a dropped ssh) while a tool
    call runs: the kernel sends SIGHUP, the call is answered, the session ends interrupted
    (SIGHUP). Writing that to the gone terminal raised EIO, which made it an internal error
    with a crash log and no end in the session log."""
    repo = tmp_path / "repo"
    committed_repo(repo, {"app.py": "x = 1\n"}).close()
    script = [call("bash", command="sleep 30"), reply("never", delay=60)]
    with ScriptedModel(script) as model:
        pid, fd = pty.fork()
        if pid == 0:  # the child: `agent run` on the new terminal, which it controls
            os.chdir(repo)
            os.environ.update({"DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1"})
            os.execvp(AGENT[0], [*AGENT, "run", "hang up", "--tool-protocol", "json",
                                 "--approval", "full-auto", "--base-url", model.url])
        shown = b""
        deadline = time.monotonic() + 60
        while b"sleep 30" not in shown and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    shown += os.read(fd, 4096)
                except OSError:
                    break
        assert b"sleep 30" in shown, shown
        time.sleep(0.5)  # the call is running
        os.close(fd)  # the terminal goes away
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 130
    listed = json.loads(agent("sessions", "--json", home=agent_home, cwd=repo).stdout)
    assert [(s["ended"], s["end_detail"]) for s in listed] == [
        ("interrupted", "interrupted (SIGHUP)")]
    log = (agent_home / "data" / "sessions" / f"{listed[0]['id']}.jsonl").read_text()
    events = [json.loads(line) for line in log.splitlines()]
    [result] = [e for e in events if e["type"] == "tool_result"]
    assert result["text"] == "interrupted by SIGHUP before this call finished"
    assert not [e for e in events if e["type"] == "error"]
    assert not (agent_home / "state" / "crashes").exists() or \
        not list((agent_home / "state" / "crashes").iterdir())


def test_a_session_with_a_damaged_log_still_lists_as_unknown(tmp_path: Path,
                                                             agent_home: Path):
    repo = tmp_path / "repo"
    committed_repo(repo, {"app.py": "x = 1\n"}).close()
    for task in ("torn", "damaged", "unreadable"):
        assert _run(repo, agent_home, task, DONE) == 0
    folder = agent_home / "data" / "sessions"
    listed = agent("sessions", "--json", home=agent_home, cwd=repo)
    ids = {s["task"]: s["id"] for s in json.loads(listed.stdout)}
    logs = {task: folder / f"{session_id}.jsonl" for task, session_id in ids.items()}
    # A torn last line is the normal result of a crash: the rest of the log still counts.
    torn = logs["torn"]
    torn.write_bytes(torn.read_bytes() + b'{"type": "final_answer", "session_id": "x", "te')
    lines = logs["damaged"].read_bytes().split(b"\n")
    lines.insert(2, b"\xff garbage that is not an event")
    logs["damaged"].write_bytes(b"\n".join(lines))
    logs["unreadable"].unlink()
    logs["unreadable"].mkdir()
    with (folder / "index.jsonl").open("a") as index:
        index.write(json.dumps({"id": "odd", "task": 7, "started": "yesterday"}) + "\n")
    (folder / "odd.jsonl").write_text("")
    for args in (["sessions"], ["sessions", "--json"]):
        proc = agent(*args, home=agent_home, cwd=repo)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr == ""
    rows = {s["id"]: s for s in json.loads(
        agent("sessions", "--json", home=agent_home, cwd=repo).stdout)}
    assert rows[ids["torn"]]["ended"] == "done"
    assert rows[ids["damaged"]]["ended"] == "unknown"
    assert rows[ids["damaged"]]["end_detail"] == "unknown (line 3 of the log is damaged)"
    assert rows[ids["unreadable"]]["ended"] == "unknown"
    assert "cannot be read" in rows[ids["unreadable"]]["end_detail"]
    assert rows["odd"]["ended"] == "unknown" and rows["odd"]["task"] == "7"  # an empty log
