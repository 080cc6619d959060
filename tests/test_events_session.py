import json
from pathlib import Path

import pytest

from agent.events import FinalAnswer, ModelTurn, SessionStart, Timings, parse_event
from agent.sessions.log import SessionLog, SessionLogError, read_events
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel
from tests.test_cli_ux import agent, call


def test_events_round_trip_through_jsonl_with_version_and_type():
    turn = ModelTurn(session_id="s", step=1, protocol="json", content="{}",
                     timings=Timings(prompt_n=10, cache_n=5, predicted_n=3, draft_n=4,
                                     draft_n_accepted=2, some_new_field=1))
    line = turn.model_dump_json()
    data = json.loads(line)
    assert data["v"] == 1 and data["type"] == "model_turn"
    back = parse_event(line)
    assert isinstance(back, ModelTurn)
    assert back.timings is not None and back.timings.draft_n_accepted == 2
    assert back.timings.model_extra == {"some_new_field": 1}


def test_session_log_is_written_per_event_and_indexed(agent_home: Path, tmp_path: Path):
    log = SessionLog("sid-1", "task", tmp_path)
    log.append(SessionStart(session_id="sid-1", task="task", workspace=str(tmp_path),
                            base_url="http://x", protocol="json"))
    assert len(log.path.read_text().splitlines()) == 1  # on disk before the session ends
    log.append(FinalAnswer(session_id="sid-1", text="ok", reason="done", steps=1))
    events = read_events(log.path)
    assert [e.type for e in events] == ["session_start", "final_answer"]
    index = (log.path.parent / "index.jsonl").read_text().splitlines()
    assert json.loads(index[0])["id"] == "sid-1"
    assert log.path.is_relative_to(agent_home)


def test_a_corrupt_session_line_is_reported_with_its_line_number(tmp_path: Path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"v": 1, "type": "error", "session_id": "s", "message": "m", '
                    '"kind": "k"}\n{"type": "nope"}\n')
    with pytest.raises(ValueError, match=r"s.jsonl:2: not a valid event"):
        read_events(path)


GOOD = '{"v": 1, "type": "error", "session_id": "s", "message": "m", "kind": "k"}'


@pytest.mark.parametrize(("line", "said"), [
    ('{"type": "nope", "session_id": "s"}', "its type 'nope' is not an event type"),
    ("\xff garbage", "it is not JSON (expected value at column 1)"),
    ("[1, 2]", "it is not a JSON object"),
    ('{"session_id": "s"}', 'it has no "type" field'),
    ('{"type": "tool_call", "session_id": "s", "step": "x", "call_id": "c", "name": "n", '
     '"arguments": {}}', "the field 'step' of this tool_call event: Input should be a valid "
     "integer"),
    ('{"type": "tool_call", "session_id": "s", "step": 1, "call_id": "c"}',
     "the tool_call event lacks the fields 'name', 'arguments'"),
    ('{"v": 2, "type": "error", "session_id": "s", "message": "m", "kind": "k"}',
     "written by a newer version"),
], ids=["unknown-type", "not-json", "not-object", "no-type", "bad-field", "missing",
        "newer"])
def test_a_bad_log_line_is_described_plainly(tmp_path: Path, line: str, said: str):
    """Issue 28 item 3: no pydantic dump (the union's class list, a documentation URL); the
    line, what is wrong with it and what still works."""
    path = tmp_path / "s.jsonl"
    path.write_text(f"{GOOD}\n{line}\n{GOOD}\n")
    with pytest.raises(ValueError) as raised:
        read_events(path)
    warnings: list[str] = []
    assert len(read_events(path, lenient=True, warn=warnings.append)) == 2
    for text in (str(raised.value), *warnings):
        assert said in text
        assert "s.jsonl:2:" in text and "\n" not in text
        assert "tagged-union" not in text and "pydantic.dev" not in text
        assert "[type=" not in text
    assert "agent undo" in str(raised.value)  # what still works when resume cannot
    assert "undo and diff" in warnings[0]


def test_a_log_that_cannot_be_written_is_a_plain_error_not_a_crash(agent_home: Path,
                                                                  tmp_path: Path):
    """A field trial: a read-only session log or sessions folder was an internal error (exit
    4) at the first event, in the middle of a turn. It is a SessionLogError (exit 3) naming
    the file: at the start when the log or the index cannot be opened, and at any event."""
    log = SessionLog("s1", "task", tmp_path)
    log.path.unlink()
    log.path.mkdir()  # stands for a log that became unwritable mid-session
    with pytest.raises(SessionLogError, match=f"cannot write the session log {log.path}: Is a "
                       "directory"):
        log.append(FinalAnswer(session_id="s1", text="x", reason="done", steps=1))
    with pytest.raises(SessionLogError, match="s1.jsonl"):
        SessionLog("s1", "", tmp_path, resume=True)
    index = log.path.parent / "index.jsonl"
    index.unlink()
    index.mkdir()
    with pytest.raises(SessionLogError, match="index.jsonl: Is a directory"):
        SessionLog("s2", "task", tmp_path)


def test_agent_run_with_an_unwritable_session_index_exits_3(agent_home: Path, tmp_path: Path):
    repo = tmp_path / "repo"
    committed_repo(repo, {"app.py": "x = 1\n"}).close()
    index = agent_home / "data" / "sessions" / "index.jsonl"
    index.mkdir(parents=True)
    with ScriptedModel([call("final_answer", text="ok")]) as model:
        proc = agent("run", "hi", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo)
    assert proc.returncode == 3, proc.stderr
    assert f"error: cannot write the session log {index}: Is a directory" in proc.stderr
    assert "internal error" not in proc.stderr
