"""The remote engine: any OpenAI-compatible endpoint given with --base-url; no launch."""

from __future__ import annotations

from pathlib import Path

from tests.scripted import ScriptedModel
from tests.test_repo_session import agent, call


def test_a_server_without_props_needs_ctx_size_then_runs_the_task(tmp_path: Path,
                                                                 agent_home: Path):
    work = tmp_path / "work"
    work.mkdir()
    # A file written: a final answer stands only after the task changed a file or ran a
    # command (agent/finish.py).
    script = [call("create", path="hi.txt", file_text="hi\n"),
              call("final_answer", text="done remotely")]
    with ScriptedModel(script) as model:
        model.props = {}  # what vLLM or SGLang answer: no llama.cpp /props
        refused = agent("run", "say hi", "--no-git", "--base-url", model.url, home=agent_home,
                        cwd=work)
        assert refused.returncode == 2
        assert "does not report its context size" in refused.stderr
        assert "--ctx-size" in refused.stderr
        assert model.requests == []  # refused before any request
        ran = agent("run", "say hi", "--no-git", "--base-url", model.url, "--ctx-size", "4096",
                    "--tool-protocol", "json", home=agent_home, cwd=work)
    assert ran.returncode == 0, ran.stderr
    assert "done: done remotely" in ran.stderr
    assert not (agent_home / "state" / "servers").exists() or \
        not list((agent_home / "state" / "servers").glob("*.json"))  # nothing launched
