"""`--base-url` at an engine that is not llama-server (vLLM, SGLang): the agent runs on what
such a server offers (`/v1/models` with `max_model_len`, no `/props`, no `timings`) and sends
none of llama-server's own fields. The server is a real process (tests/vllm_standin.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.client import ContextOverflow, ServerClient, ServerUnavailable
from agent.sessions.slots import hold_slot, server_slot
from agent.usage import usage_timings
from tests.scripted import ScriptedModel
from tests.test_repo_session import agent
from tests.vllm_standin import MAX_MODEL_LEN, SERVED

FINISH = "<final_answer>\n<text>made hello.py</text>\n</final_answer>"
CREATE = ("I'll write it.\n<create>\n<path>hello.py</path>\n<file_text>\nprint('hello')\n"
          "</file_text>\n</create>")
NOTE = "<create>\n<path>done.txt</path>\n<file_text>\ndone\n</file_text>\n</create>"
"""A file that is not code: a final answer stands only after the task changed a file or ran
a command (agent/finish.py)."""
LLAMA_ONLY = ("cache_prompt", "id_slot", "speculative.n_max", "n_probs", "slot_id")


@dataclass
class Standin:
    """A running stand-in: its URL and the completion bodies it received."""

    url: str
    log: Path

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]


@pytest.fixture
def vllm(tmp_path: Path) -> Iterator[Any]:
    """Start ``tests.vllm_standin`` with a script and a mode; stopped at teardown."""
    procs: list[subprocess.Popen] = []

    def start(script: list[dict[str, Any]], mode: str = "ok") -> Standin:
        n = len(procs)
        script_file, log, port_file = (tmp_path / f"script{n}.json", tmp_path / f"log{n}.jsonl",
                                       tmp_path / f"port{n}")
        script_file.write_text(json.dumps(script))
        proc = subprocess.Popen([sys.executable, "-m", "tests.vllm_standin", str(script_file),
                                 str(log), str(port_file), "--mode", mode],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        procs.append(proc)
        deadline = time.monotonic() + 60
        while not port_file.exists():  # bounded: the stand-in writes it once it listens
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "the stand-in did not start in 60 s"
            time.sleep(0.05)
        return Standin(f"http://127.0.0.1:{port_file.read_text()}", log)

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


def _session_events(home: Path) -> list[dict[str, Any]]:
    logs = [p for p in home.rglob("sessions/*.jsonl") if p.name != "index.jsonl"]
    assert len(logs) == 1, logs
    return [json.loads(line) for line in logs[0].read_text().splitlines()]


def _one_error_line(stderr: str) -> str:
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    assert "Traceback" not in stderr
    return errors[0]


def test_agent_run_against_a_vllm_server_creates_the_file_with_plain_openai_requests(
        tmp_path: Path, agent_home: Path, vllm: Any):
    work = tmp_path / "work"
    work.mkdir()
    # The final answer twice: the first is refused once, as no command checked hello.py.
    server = vllm([{"content": CREATE}, {"content": FINISH, "cached": 96}, {"content": FINISH}])
    ran = agent("run", "write hello.py", "--no-git", "--base-url", server.url,
                home=agent_home, cwd=work)
    assert ran.returncode == 0, ran.stderr
    assert (work / "hello.py").read_text() == "print('hello')\n"
    assert f"context {MAX_MODEL_LEN} tokens from /v1/models max_model_len" in ran.stderr
    assert "token counts estimated" not in ran.stderr  # vLLM's own /tokenize answered
    # No timings: the step lines come from usage; reuse is said only where it is reported.
    assert "(reuse not reported)" in ran.stderr and "(reused 96)" in ran.stderr
    sent = server.requests()
    assert len(sent) == 3
    for body in sent:
        assert body["model"] == SERVED
        assert not [k for k in LLAMA_ONLY if k in body], body.keys()
        assert "tools" not in body and "response_format" not in body  # text protocol
        assert body["stream_options"] == {"include_usage": True}
    # Append-only: the second request continues the first byte for byte (prefix caching).
    first, second = sent[0]["messages"], sent[1]["messages"]
    assert second[:len(first)] == first and len(second) > len(first)
    assert second[len(first)] == {"role": "assistant", "content": CREATE}
    events = _session_events(agent_home)
    start = next(e for e in events if e["type"] == "session_start")
    assert start["n_ctx"] == MAX_MODEL_LEN and start["protocol"] == "text"
    choice = next(e for e in events if e["type"] == "protocol")
    assert choice["facts"]["llama_server"] is False
    assert choice["facts"]["served_model"] == SERVED
    turns = [e for e in events if e["type"] == "model_turn"]
    assert [t["timings"]["source"] for t in turns] == ["usage", "usage", "usage"]
    assert turns[0]["timings"]["cache_n"] is None and turns[1]["timings"]["cache_n"] == 96


def test_new_project_against_a_vllm_server_writes_tests_that_pass(
        tmp_path: Path, agent_home: Path, vllm: Any):
    module = ("<create>\n<path>calc.py</path>\n<file_text>\ndef add(a, b):\n    return a + b\n"
              "</file_text>\n</create>")
    test = ("<create>\n<path>test_calc.py</path>\n<file_text>\nfrom calc import add\n\n\n"
            "def test_add():\n    assert add(1, 2) == 3\n</file_text>\n</create>")
    # The final answer twice: the first is refused once, as no command checked the code.
    server = vllm([{"content": module}, {"content": test}, {"content": FINISH},
                   {"content": FINISH}])
    ran = agent("new-project", "an add function", "--dir", "proj", "--base-url", server.url,
                home=agent_home, cwd=tmp_path, timeout=300)
    out = ran.stdout + ran.stderr
    assert ran.returncode == 0, out
    assert "passed" in out and (tmp_path / "proj" / "test_calc.py").exists()
    assert "the server does not report the model's size" in out  # simple recipe, said
    assert "prefilled, cache reuse not reported," in out  # never a claimed "0 cached"
    assert "(the server does not report cache reuse)" in out
    assert all(body["model"] == SERVED for body in server.requests())


def test_chat_status_names_the_served_model_and_its_context(
        tmp_path: Path, agent_home: Path, vllm: Any):
    server = vllm([])
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1"}
    ran = subprocess.run([sys.executable, "-m", "agent", "chat", "--no-git", "--base-url",
                          server.url], cwd=tmp_path, env=env, input="/status\n/exit\n",
                         capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert f"n_ctx {MAX_MODEL_LEN}, model {SERVED}" in ran.stdout + ran.stderr


def _say_done(server: Any, cwd: Path, home: Path, *extra: str) -> Any:
    """``agent run "say done" --no-git --base-url SERVER [extra]`` in ``cwd``."""
    return agent("run", "say done", "--no-git", "--base-url", server.url, *extra, home=home,
                 cwd=cwd)


def test_a_server_without_tokenize_gets_estimated_counts_and_says_so(
        tmp_path: Path, agent_home: Path, vllm: Any):
    server = vllm([{"content": NOTE}, {"content": FINISH}], mode="no-tokenize")
    ran = _say_done(server, tmp_path, agent_home)
    assert ran.returncode == 0, ran.stderr
    assert "token counts estimated (~3 characters a token: no /tokenize)" in ran.stderr


def test_a_models_list_without_max_model_len_needs_ctx_size_then_uses_it(
        tmp_path: Path, agent_home: Path, vllm: Any):
    server = vllm([{"content": NOTE}, {"content": FINISH}], mode="no-max-len")
    refused = _say_done(server, tmp_path, agent_home)
    assert refused.returncode == 2
    line = _one_error_line(refused.stderr)
    assert "no max_model_len in /v1/models" in line and "--ctx-size" in line
    assert server.requests() == []
    ran = _say_done(server, tmp_path, agent_home, "--ctx-size", "4096")
    assert ran.returncode == 0, ran.stderr
    assert "context 4096 tokens from --ctx-size" in ran.stderr


def test_a_models_list_that_is_not_json_is_refused_in_one_line(
        tmp_path: Path, agent_home: Path, vllm: Any):
    server = vllm([{"content": FINISH}], mode="garbage-models")
    refused = _say_done(server, tmp_path, agent_home)
    assert refused.returncode == 2
    assert "does not report its context size" in _one_error_line(refused.stderr)
    # With --ctx-size it gets as far as the model name, which it could not read: said so.
    named = _say_done(server, tmp_path, agent_home, "--ctx-size", "4096")
    assert named.returncode == 3
    line = _one_error_line(named.stderr)
    assert "does not serve model 'local'" in line and "/v1/models" in line


def test_a_models_list_answering_500_is_a_server_error_in_one_line(
        tmp_path: Path, agent_home: Path, vllm: Any):
    server = vllm([], mode="models-500")
    ran = _say_done(server, tmp_path, agent_home)
    assert ran.returncode == 3
    assert "answered 500 on /v1/models" in _one_error_line(ran.stderr)


def test_a_completion_answering_500_ends_the_task_in_one_line(
        tmp_path: Path, agent_home: Path, vllm: Any):
    server = vllm([{"status": 500, "body": {"error": {"message": "CUDA error", "code": 500}}}])
    ran = _say_done(server, tmp_path, agent_home)
    assert ran.returncode == 3, ran.stderr
    assert "CUDA error" in _one_error_line(ran.stderr)


def test_vllm_context_overflow_in_words_is_a_context_overflow(vllm: Any):
    message = ("This model's maximum context length is 32768 tokens. However, you requested "
               "40000 tokens (37952 in the messages, 2048 in the completion). Please reduce "
               "the length of the messages or completion.")
    server = vllm([{"status": 400, "body": {"error": {"message": message,
                                                      "type": "BadRequestError",
                                                      "code": 400}}}])
    client = ServerClient(server.url, 30.0)
    with pytest.raises(ContextOverflow) as caught:
        client.complete([{"role": "user", "content": "hi"}])
    assert (caught.value.n_ctx, caught.value.n_prompt_tokens) == (32768, 40000)


def test_a_remote_client_does_not_use_llama_server_endpoints(vllm: Any):
    server = vllm([])
    client = ServerClient(server.url, 30.0)
    assert client.props() == {} and not client.is_llama_server()
    assert client.n_ctx() == MAX_MODEL_LEN and client.model_id() == SERVED
    assert len(client.tokenize("x" * 40)) == 10  # vLLM's /tokenize, `prompt` form
    with pytest.raises(ServerUnavailable):
        client.apply_template([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("usage", [{}, {"prompt_tokens": "12", "completion_tokens": 3},
                                   {"prompt_tokens": 12}])
def test_usage_without_counts_gives_no_timings(usage: dict[str, Any]):
    assert usage_timings(usage, None) is None


def test_usage_with_an_impossible_cached_count_reports_no_reuse():
    t = usage_timings({"prompt_tokens": 10, "completion_tokens": 2,
                       "prompt_tokens_details": {"cached_tokens": 50}}, None)
    assert t is not None and t.cache_n is None and t.prompt_n == 10
    assert t.predicted_per_second is None  # no first token seen: no speed claimed


@pytest.mark.timeout(60)  # a slot wait would loop; this bounds the failure
def test_sessions_on_a_remote_engine_hold_no_slot_and_never_wait(agent_home: Path, vllm: Any):
    server = vllm([])
    notes: list[str] = []
    client = ServerClient(server.url, 30.0)
    # Another session's task holds the only slot lock for that URL.
    with hold_slot(server.url, 1, notes.append, "other"), \
            server_slot(client, notes.append, "mine") as slot:
        assert slot is None
    assert notes == []


def test_sessions_on_llama_server_still_hold_its_slot(agent_home: Path):
    with ScriptedModel([]) as model, \
            server_slot(ServerClient(model.url, 30.0), lambda m: None, "mine") as slot:
        assert slot == 0
