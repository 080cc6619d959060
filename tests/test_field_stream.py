"""Field cases 3 and 8: a stream the server breaks is the server's fault, said as such (no
internal error, no "Format error" sent to the model), and a reply cut by max_tokens is never
reported as done."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel, raw_reply, reply
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
