"""Issue 28, sessions 1 and 2: a resumed session answers every call of the last reply exactly
once (also calls that never started), and a log whose last line a crash cut is mended before
anything is appended. Real session logs, cut the way a kill -9 leaves them, and the scripted
model on loopback."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from agent.config import load_settings
from agent.sessions.log import list_sessions
from agent.sessions.record import load_record
from agent.sessions.repo import RepoSession
from agent.ui import Reporter
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel, reply
from tests.test_cli_ux import AGENT, agent, call
from tests.test_role_alternation import assert_alternating

TWO_VIEWS = {
    "native": reply(tool_calls=[("view", {"path": "app.py"}), ("view", {"path": "b.py"})]),
    "text": reply("<view>\n<path>app.py</path>\n</view>\n<view>\n<path>b.py</path>\n</view>"),
}
DONE = {"native": reply("done"),
        "text": reply("<final_answer>\n<text>done</text>\n</final_answer>")}
WORK = {"native": reply(tool_calls=[("bash", {"command": "true"})]),
        "text": reply("<bash>\n<command>true</command>\n</bash>")}
"""A command that succeeds: a final answer stands only after the task changed a file or ran
a command (agent/finish.py)."""


def wrote(path: str, text: str) -> list[dict]:
    """A json task that writes a file that is not code, then ends (commands need approval in
    ``agent run``'s default mode)."""
    return [call("create", path=path, file_text="made\n"), call("final_answer", text=text)]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    committed_repo(tmp_path / "repo", {"app.py": "x = 1\n", "b.py": "y = 2\n"}).close()
    return tmp_path / "repo"


def _session(url: str, repo: Path, protocol: str, resume: str | None = None) -> RepoSession:
    settings = load_settings(cli={"base_url": url, "approval": "full-auto",
                                  "tool_protocol": protocol})
    return RepoSession(settings, repo, Reporter(), resume=resume)


def _log(home: Path) -> Path:
    [log] = [p for p in (home / "data" / "sessions").glob("*.jsonl") if p.name != "index.jsonl"]
    return log


def _killed_during_call(repo: Path, home: Path, protocol: str, nth: int) -> Path:
    """A session whose model asked for two calls in one reply, its log cut right after the
    ``nth`` call's ``tool_call`` event: what kill -9 leaves while that call runs."""
    # Two final answers: views change nothing, so the second stops the task (nothing_changed);
    # the log is cut before either anyway.
    with ScriptedModel([TWO_VIEWS[protocol], DONE[protocol], DONE[protocol]],
                       supports_tools=protocol == "native") as model:
        session = _session(model.url, repo, protocol)
        try:
            session.run_task("look at both")
        finally:
            session.close()
    log = _log(home)
    lines = log.read_text().splitlines(keepends=True)
    calls = [i for i, line in enumerate(lines) if '"type":"tool_call"' in line]
    log.write_text("".join(lines[: calls[nth - 1] + 1]))
    return log


@pytest.mark.parametrize(("protocol", "nth"), [("native", 1), ("native", 2), ("text", 1),
                                               ("text", 2)])
def test_a_resumed_session_answers_every_call_of_the_last_reply_once(
        protocol: str, nth: int, repo: Path, agent_home: Path):
    log = _killed_during_call(repo, agent_home, protocol, nth)
    with ScriptedModel([WORK[protocol], DONE[protocol]],
                       supports_tools=protocol == "native") as model:
        session = _session(model.url, repo, protocol, resume=log.stem)
        try:
            result = session.run_task("go on")
        finally:
            session.close()
    assert result.reason == "done"
    sent = model.requests[0]["messages"]
    # The reply, its answers, then (item 4) an assistant line before the next task's message,
    # so that no template sees two user messages in a row.
    [last, bridge] = [i for i, m in enumerate(sent) if m["role"] == "assistant"]
    assert bridge == len(sent) - 2 and sent[bridge]["content"].startswith("[no reply:")
    assert_alternating(sent)
    answers = sent[last + 1:bridge]
    if protocol == "native":
        ids = [c["id"] for c in sent[last]["tool_calls"]]
        assert [m["tool_call_id"] for m in answers if m["role"] == "tool"] == ids, answers
        first, second = (m["content"] for m in answers)
    else:
        # One user message answers the whole reply, one result per call, in order.
        [answer] = answers
        assert answer["role"] == "user"
        first, second = answer["content"].split("\n\n[result of tool view]\n")
        assert first.startswith("[result of tool view]\n")
    if nth == 1:  # killed during the first call: the second never started, and says so
        assert "interrupted" in first and "x = 1" not in first
        assert "not run" in second and "interrupted" not in second
    else:  # killed during the second: the first's real result, even if it was never sent
        assert "x = 1" in first and "interrupted" not in first
        assert "interrupted" in second
    # The mended history is logged: the next resume sends the same conversation.
    replayed = [json.loads(line)["message"] for line in log.read_text().splitlines()
                if '"type":"message"' in line]
    assert sent == replayed[: len(sent)]


def test_a_finished_task_leaves_nothing_to_answer(repo: Path, agent_home: Path):
    """A reply with a call after its final answer: the task ended, nothing is added."""
    script = [reply("<view>\n<path>app.py</path>\n</view>"), WORK["text"],
              reply("<final_answer>\n<text>done</text>\n</final_answer>\n"
                    "<view>\n<path>b.py</path>\n</view>")]
    with ScriptedModel(script) as model:
        session = _session(model.url, repo, "text")
        try:
            session.run_task("look")
        finally:
            session.close()
    before = _log(agent_home).read_text()
    with ScriptedModel([]) as model:
        session = _session(model.url, repo, "text", resume=_log(agent_home).stem)
        session.close()
    assert _log(agent_home).read_text() == before


def test_a_torn_log_is_set_aside_before_resume_appends(repo: Path, agent_home: Path):
    with ScriptedModel(wrote("made.txt", "ok")) as model:
        assert agent("run", "look", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo).returncode == 0
    log = _log(agent_home)
    fragment = b'{"type":"model_turn","session_id":"x","st'
    log.write_bytes(log.read_bytes() + fragment)
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1"}
    for answer in ("again", "and again"):
        with ScriptedModel(wrote(f"{answer}.txt", answer)) as model:
            proc = subprocess.run([*AGENT, "resume", log.stem, "--base-url", model.url],
                                  cwd=repo, env=env, input="go on\n", capture_output=True,
                                  text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert f"done: {answer}" in proc.stderr
    assert log.with_name(log.name + ".torn").read_bytes() == fragment + b"\n"
    load_record(log.stem)  # every line of the log is an event again
    [listed] = list_sessions()
    assert listed.ended == "done" and listed.tasks == 3


def test_undo_on_a_torn_log_sets_the_fragment_aside_too(repo: Path, agent_home: Path):
    """`agent undo` appends its checkpoint to the log: onto a clean line, so a second undo
    finds the first and undoes it."""
    # Two final answers: the first is refused once, as no command checked the edited code.
    script = [call("view", path="app.py"), call("create", path="app.py", file_text="x = 2\n"),
              call("final_answer", text="done"), call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        assert agent("run", "bump x", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo).returncode == 0
    log = _log(agent_home)
    log.write_bytes(log.read_bytes() + b'{"type": "model_turn", "st')
    assert agent("undo", home=agent_home, cwd=repo).returncode == 0
    assert (repo / "app.py").read_text() == "x = 1\n"
    again = agent("undo", home=agent_home, cwd=repo)
    assert again.returncode == 0, again.stderr
    assert (repo / "app.py").read_text() == "x = 2\n" and "warning" not in again.stderr
    load_record(log.stem)


def test_a_damaged_session_is_refused_by_resume_with_the_reason(repo: Path, agent_home: Path,
                                                                tmp_path: Path):
    """A field trial: a log replaced by a folder read "no session" (while `agent sessions`
    listed it); a message of role "alien" was resumed and every turn after it failed with the
    server's 400; a session whose repository was gone said only "does not exist"."""
    with ScriptedModel(wrote("made.txt", "ok")) as model:
        assert agent("run", "look", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo).returncode == 0
    log = _log(agent_home)
    good = log.read_text()
    alien = {"v": 1, "session_id": log.stem, "ts": 1, "type": "message",
             "message": {"role": "alien", "content": [1, 2]}}
    log.write_text(good + json.dumps(alien) + "\n")
    # Refused before any server is asked (none answers at port 9).
    proc = agent("resume", log.stem, "--base-url", "http://127.0.0.1:9", home=agent_home,
                 cwd=repo)
    assert proc.returncode == 3, proc.stderr
    assert f"session '{log.stem}' cannot be resumed: message " in proc.stderr
    assert "has the role 'alien'" in proc.stderr

    log.unlink()
    log.mkdir()
    proc = agent("resume", log.stem, home=agent_home, cwd=repo)
    assert proc.returncode == 3 and f"the log of session '{log.stem}'" in proc.stderr
    assert "is not a file" in proc.stderr
    log.rmdir()

    log.write_text(good)
    moved = tmp_path / "moved"
    repo.rename(moved)
    proc = agent("resume", log.stem, home=agent_home, cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert f"session {log.stem} ran in {repo}, which is no longer a folder" in proc.stderr

    for odd in ("../index", "a/b"):
        proc = agent("resume", odd, home=agent_home, cwd=tmp_path)
        assert proc.returncode == 3 and f"no session '{odd}'" in proc.stderr, proc.stderr
