"""Field cases 3 and 8: a stream the server breaks is the server's fault, said as such (no
internal error, no "Format error" sent to the model), and a reply cut by max_tokens is never
reported as done. Issue 28 item 5: ``max_time`` holds inside a model step."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agent.client import ServerClient, TimeLimitReached
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel, raw_reply, reply, runaway_reply
from tests.test_cli_ux import agent

CHUNK = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "scripted"}


def _chunk(delta: dict, finish: str | None = None) -> str:
    return "data: " + json.dumps({**CHUNK, "choices": [{"index": 0, "delta": delta,
                                                         "finish_reason": finish}]})


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    committed_repo(tmp_path / "repo", {"app.py": "x = 1\n"}).close()
    return tmp_path / "repo"


@pytest.mark.parametrize(("script", "expected"), [
    ([_chunk({"role": "assistant", "content": None}), "data: {not json"],
     "malformed stream line"),
    ([_chunk({"role": "assistant", "content": None}), _chunk({"content": "half a repl"})],
     "ended without a finish reason"),
], ids=["garbage-line", "no-finish-reason"])
def test_a_broken_stream_is_a_server_error(script: list[str], expected: str, repo: Path,
                                           agent_home: Path):
    with ScriptedModel([raw_reply(*script)]) as model:
        proc = agent("run", "look", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert expected in proc.stderr and "server" in proc.stderr
    assert "internal error" not in proc.stderr
    assert len(model.requests) == 1  # no "Format error" round trip to the model


def test_a_reply_cut_by_max_tokens_is_not_done(repo: Path, agent_home: Path):
    runaway = "# " * 2000
    with ScriptedModel([reply(runaway, finish_reason="length")]) as model:
        proc = agent("run", "look", "--tool-protocol", "native", "--base-url", model.url,
                     home=agent_home, cwd=repo)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "cut at the token limit" in out
    # The runaway text is shown once (it streamed), not again as a final answer.
    assert sum("# # # # #" in line for line in out.splitlines()) <= 1, out[-600:]


def test_a_json_call_cut_by_max_tokens_stops_instead_of_retrying(repo: Path, agent_home: Path):
    cut = '{"tool": "create", "arguments": {"path": "a.py", "file_text": "x = 1\\nx = 1\\n'
    with ScriptedModel([reply(cut, finish_reason="length")] * 3) as model:
        proc = agent("run", "write", "--tool-protocol", "json", "--base-url", model.url,
                     home=agent_home, cwd=repo)
    assert proc.returncode == 1 and "cut at the token limit" in proc.stdout + proc.stderr
    assert len(model.requests) == 1


def _events(home: Path) -> list[dict]:
    [log] = [p for p in (home / "data" / "sessions").glob("*.jsonl") if p.name != "index.jsonl"]
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_max_time_stops_a_runaway_model_step_and_says_so(repo: Path, agent_home: Path):
    # 20 s of decoding against a 1 s budget: the step must not run to its end.
    with ScriptedModel([runaway_reply("# ", 400, 0.05)]) as model:
        proc = agent("run", "look", "--tool-protocol", "json", "--max-time", "1",
                     "--base-url", model.url, home=agent_home, cwd=repo)
        # The server notices the closed stream at its next write.
        for _ in range(100):
            if model.cut_off:
                break
            time.sleep(0.05)
        assert model.cut_off == 1, "the stream ran to its end"
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "the time limit ran out during model call 1" in out, out[-800:]
    assert "raise --max-time" in out
    events = _events(agent_home)
    [end] = [e for e in events if e["type"] == "final_answer"]
    assert end["reason"] == "max_time"
    assert "stopped" in end["text"] and "characters" in end["text"]
    [turn] = [e for e in events if e["type"] == "model_turn"]
    assert turn["finish_reason"] == "max_time" and turn["content"].startswith("# # ")
    assert len(model.requests) == 1


def test_a_silent_prefill_past_the_deadline_is_the_time_limit_not_a_dead_server():
    with ScriptedModel([reply("late", delay=1.5)]) as model:
        client = ServerClient(model.url, idle_timeout=60.0)
        with pytest.raises(TimeLimitReached) as caught:
            client.complete([{"role": "user", "content": "hi"}],
                            deadline=time.monotonic() + 0.3)
    assert caught.value.turn.content == ""
