"""The task benchmark's peer adapters (benchmarks/tasks/adapters/), without a server: the
command line, config and environment each peer is run with, their install (pip and npm, the
refusals), and the parsing of each peer's own output into the record's fields."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from benchmarks.tasks import ROOT
from benchmarks.tasks.__main__ import main, parser
from benchmarks.tasks.adapters import ADAPTERS
from benchmarks.tasks.adapters.base import AgentRun, BenchError, Limits
from benchmarks.tasks.adapters.codex import Codex
from benchmarks.tasks.adapters.install import PEERS, PEERS_ENV, install_peer, peer_bin
from benchmarks.tasks.adapters.mini_swe_agent import MiniSweAgent
from benchmarks.tasks.adapters.opencode import OpenCode
from benchmarks.tasks.adapters.qwen_code import QwenCode
from benchmarks.tasks.tasks import TaskError, select

[PAGINATION] = select(ROOT, "fix-failing-test-pagination")
URL = "http://127.0.0.1:8080"
LIMITS = Limits(max_steps=7, timeout_s=300)


def version_call(out: str):
    """A stand-in for subprocess.run that answers every command with ``out``."""
    seen: list[list[str]] = []

    def call(argv: list[str]) -> subprocess.CompletedProcess:
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, out, "")
    call.seen = seen  # type: ignore[attr-defined]
    return call


def ready(cls, tmp_path: Path, version: str, **kwargs):
    binary = tmp_path / "bin" / PEERS[cls.name].command
    binary.parent.mkdir(parents=True, exist_ok=True)
    binary.write_text("")
    peer = cls(base_url=URL, model="smol.gguf", binary=binary, call=version_call(version),
               **kwargs)
    peer.setup()
    return peer, binary


def run(stdout: str = "", code: int | None = 0, stderr: str = "") -> AgentRun:
    return AgentRun(["peer"], code, stdout, stderr, 3.0)


def lines(*events: dict) -> str:
    return "\n".join(json.dumps(e) for e in events) + "\n"


def test_every_peer_is_an_agent_and_an_installable_package():
    assert set(ADAPTERS) == {"dflash-agent", "aider", "mini-swe-agent", "opencode",
                             "qwen-code", "codex"}
    assert set(PEERS) == set(ADAPTERS) - {"dflash-agent"}
    assert str(PEERS["aider"]) == "aider-chat==0.86.2"
    assert str(PEERS["opencode"]) == "opencode-ai@1.18.33"
    assert str(PEERS["qwen-code"]) == "@qwen-code/qwen-code@0.15.10"
    args = parser().parse_args(["run", "--agent", "qwen-code", "--out", "r.jsonl",
                                "--aider-bin", "/x/qwen"])
    assert args.peer_bin == Path("/x/qwen")  # the old flag still names the executable


# ---------------------------------------------------------------- command lines


def test_mini_swe_agent_runs_yolo_with_the_text_format_and_the_task_limits(tmp_path: Path):
    mini, binary = ready(MiniSweAgent, tmp_path, "2.4.6\n")
    assert mini.version == "mini-swe-agent 2.4.6" and mini.label == "mini-swe-agent/text"
    assert mini._call.seen == [[str(binary.parent / "python"), "-c",  # type: ignore[attr-defined]
                                "import importlib.metadata as m; "
                                "print(m.version('mini-swe-agent'))"]]
    repo, scratch = tmp_path / "repo", tmp_path / "scratch"
    argv = mini.command(PAGINATION, repo, LIMITS, scratch)
    assert argv == [
        str(binary), "-c", "mini_textbased.yaml", "-c", "model.model_class=litellm_textbased",
        "-c", "model.cost_tracking=ignore_errors", "--yolo", "--exit-immediately",
        "--cost-limit", "0", "-c", "model.model_kwargs.api_base=http://127.0.0.1:8080/v1",
        "-c", "model.model_kwargs.api_key=x", "-c", "agent.step_limit=7",
        "-c", "agent.wall_time_limit_seconds=300", "-c", f"environment.cwd={repo}",
        "-m", "openai/smol.gguf", "-t", PAGINATION.instruction,
        "-o", str(scratch / "trajectory.json")]
    env = mini.env()
    assert env["MSWEA_CONFIGURED"] == "true" and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert env["MSWEA_GLOBAL_CONFIG_DIR"] == str(scratch / "config")
    assert mini.info()["flags"] == argv[1:11]
    tool, _ = ready(MiniSweAgent, tmp_path, "2.4.6\n", edit_format="tool")
    assert tool.flags()[:4] == ["-c", "mini.yaml", "-c", "model.model_class=litellm"]
    assert tool.config() == {"edit_format": "tool", "preset": None, "server": "given"}


def test_opencode_runs_its_json_mode_with_the_server_as_a_provider(tmp_path: Path):
    opencode, binary = ready(OpenCode, tmp_path, "1.18.33\n")
    assert opencode.version == "1.18.33" and opencode.label == "opencode/native"
    repo, scratch = tmp_path / "repo", tmp_path / "scratch"
    argv = opencode.command(PAGINATION, repo, LIMITS, scratch)
    assert argv == [str(binary), "run", "--format", "json", "--auto", "--model",
                    "llama/smol.gguf", "--dir", str(repo), PAGINATION.instruction]
    config = json.loads((scratch / "opencode.json").read_text())
    provider = config["provider"]["llama"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"]["baseURL"] == "http://127.0.0.1:8080/v1"
    assert list(provider["models"]) == ["smol.gguf"] and config["model"] == "llama/smol.gguf"
    assert config["agent"]["build"]["steps"] == 7 and config["autoupdate"] is False
    assert config["permission"] == {"edit": "allow", "bash": "allow", "webfetch": "deny"}
    env = opencode.env()
    assert env["OPENCODE_CONFIG"] == str(scratch / "opencode.json")
    assert env["XDG_DATA_HOME"] == str(scratch / "data")
    assert env["OPENCODE_DISABLE_MODELS_FETCH"] == "1"


def test_qwen_code_runs_headless_in_yolo_mode_against_the_server(tmp_path: Path):
    qwen, binary = ready(QwenCode, tmp_path, "0.15.10\n")
    repo, scratch = tmp_path / "repo", tmp_path / "scratch"
    argv = qwen.command(PAGINATION, repo, LIMITS, scratch)
    assert argv == [str(binary), PAGINATION.instruction, "--yolo", "--auth-type", "openai",
                    "--output-format", "stream-json", "--openai-base-url",
                    "http://127.0.0.1:8080/v1", "--openai-api-key", "x", "-m", "smol.gguf",
                    "--max-session-turns", "7"]
    env = qwen.env()
    assert (env["OPENAI_BASE_URL"], env["OPENAI_MODEL"]) == ("http://127.0.0.1:8080/v1",
                                                             "smol.gguf")
    assert env["HOME"] == str(scratch / "home") and (scratch / "home").is_dir()
    assert qwen.info()["version"] == "0.15.10"


def test_codex_runs_exec_with_the_server_as_a_responses_provider(tmp_path: Path):
    codex, binary = ready(Codex, tmp_path, "codex-cli 0.171.0\n")
    repo, scratch = tmp_path / "repo", tmp_path / "scratch"
    argv = codex.command(PAGINATION, repo, LIMITS, scratch)
    assert argv[:2] == [str(binary), "exec"] and argv[-1] == PAGINATION.instruction
    assert argv[-5:-1] == ["-m", "smol.gguf", "-C", str(repo)]
    assert 'model_providers.llama.base_url="http://127.0.0.1:8080/v1"' in argv
    assert 'model_providers.llama.wire_api="responses"' in argv
    assert 'approval_policy="never"' in argv and "--json" in argv
    assert codex.env()["CODEX_HOME"] == str(scratch / "codex-home")
    assert codex.timeout(LIMITS) == 300


def test_a_peer_refuses_an_edit_format_it_lacks_and_an_unset_server(tmp_path: Path):
    with pytest.raises(TaskError, match="mini-swe-agent has no edit format 'whole'"):
        MiniSweAgent(edit_format="whole")
    with pytest.raises(TaskError, match="not set up"):
        OpenCode(binary=tmp_path / "x").command(PAGINATION, tmp_path, LIMITS, tmp_path)


# ---------------------------------------------------------------- install


def fake_npm(version: str | None, ok: bool = True):
    """A stand-in for subprocess.run: ``npm install --prefix P pkg@v`` writes the package's
    package.json (or fails), ``--version`` answers ``version``."""
    seen: list[list[str]] = []

    def call(argv: list[str]) -> subprocess.CompletedProcess:
        seen.append(argv)
        if argv[1:2] == ["install"]:
            if not ok:
                return subprocess.CompletedProcess(argv, 1, "", "npm error code E404\n"
                                                   "npm error 404 Not Found - opencode-ai")
            package, _, wanted = argv[-1].rpartition("@")
            meta = Path(argv[3]) / "node_modules" / package / "package.json"
            meta.parent.mkdir(parents=True, exist_ok=True)
            meta.write_text(json.dumps({"name": package, "version": wanted}))
        return subprocess.CompletedProcess(argv, 0, f"{version}\n", "")
    call.seen = seen  # type: ignore[attr-defined]
    return call


def test_an_npm_peer_installs_into_its_own_prefix_once(tmp_path: Path, monkeypatch):
    monkeypatch.setattr("benchmarks.tasks.adapters.install.shutil.which",
                        lambda name: "/usr/bin/npm")
    call = fake_npm("1.18.33")
    assert install_peer("opencode", tmp_path, call=call) == "1.18.33"
    assert call.seen[0] == ["/usr/bin/npm", "install", "--prefix", str(tmp_path / "opencode"),
                            "--no-audit", "--no-fund", "--save-exact", "opencode-ai@1.18.33"]
    assert call.seen[1] == [str(tmp_path / "opencode/node_modules/.bin/opencode"), "--version"]
    again = fake_npm("1.18.33")
    install_peer("opencode", tmp_path, call=again)
    assert [a[-1] for a in again.seen] == ["--version"]  # left alone
    monkeypatch.setenv(PEERS_ENV, str(tmp_path))
    assert peer_bin("qwen-code") == tmp_path / "qwen-code/node_modules/.bin/qwen"
    assert peer_bin("mini-swe-agent") == tmp_path / "mini-swe-agent/bin/mini"


def test_install_refuses_an_unknown_peer_a_failing_npm_and_a_missing_npm(
        tmp_path: Path, monkeypatch, capsys):
    with pytest.raises(BenchError, match="unknown peer 'crush'"):
        install_peer("crush", tmp_path, call=fake_npm(None))
    monkeypatch.setattr("benchmarks.tasks.adapters.install.shutil.which",
                        lambda name: "/usr/bin/npm")
    with pytest.raises(BenchError, match="npm could not install opencode-ai@1.18.33 .*404"):
        install_peer("opencode", tmp_path, call=fake_npm(None, ok=False))
    monkeypatch.setenv(PEERS_ENV, str(tmp_path / "peers"))
    monkeypatch.setattr("benchmarks.tasks.adapters.install.run_command",
                        fake_npm(None, ok=False))
    assert main(["install-peer", "qwen-code"]) == 3
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("error: npm could not install @qwen-code/qwen-code@0.15.10")
    monkeypatch.setattr("benchmarks.tasks.adapters.install.shutil.which", lambda name: None)
    with pytest.raises(BenchError, match="npm is not on PATH"):
        install_peer("codex", tmp_path, call=fake_npm(None))


def test_a_peer_that_is_not_installed_is_one_error_line_and_exit_3(
        tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv(PEERS_ENV, str(tmp_path / "none"))
    monkeypatch.setattr("benchmarks.tasks.adapters.peer.shutil.which", lambda name: None)
    for name in ("mini-swe-agent", "opencode", "qwen-code", "codex"):
        assert main(["run", "--agent", name, "--base-url", "http://127.0.0.1:1", "--out",
                     str(tmp_path / "r.jsonl"), "--tasks", "rename-function"]) == 3
        err = capsys.readouterr().err.splitlines()
        assert f"install-peer {name}" in err[-1] and err[-1].startswith("error:")
    assert main(["run", "--agent", "opencode", "--edit-format", "whole", "--out",
                 str(tmp_path / "r.jsonl"), "--tasks", "rename-function"]) == 2


# ---------------------------------------------------------------- output


def test_a_mini_swe_agent_trajectory_gives_steps_commands_format_errors_and_tokens(
        tmp_path: Path):
    mini, _ = ready(MiniSweAgent, tmp_path, "2.4.6\n")
    scratch = tmp_path / "scratch"
    mini.command(PAGINATION, tmp_path / "repo", LIMITS, scratch)
    usage = {"prompt_tokens": 900, "completion_tokens": 40,
             "prompt_tokens_details": {"cached_tokens": 600}}
    timings = {"prompt_n": 120, "cache_n": 800, "predicted_n": 30, "predicted_ms": 300.0}
    trajectory = {"info": {"exit_status": "Submitted", "model_stats": {"api_calls": 3}},
                  "messages": [
                      {"role": "system", "content": "..."},
                      {"role": "user", "content": "no block", "extra": {
                          "interrupt_type": "FormatError", "response": {"usage": usage}}},
                      {"role": "assistant", "content": "```", "extra": {
                          "actions": [{"command": "sed -i s/1/0/ pagination.py"}],
                          "response": {"usage": usage, "timings": timings}}},
                      {"role": "user", "content": "{}", "extra": {"returncode": 2}},
                      {"role": "assistant", "content": "```", "extra": {
                          "actions": [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}],
                          "response": {"usage": usage}}},
                      {"role": "exit", "content": "", "extra": {"exit_status": "Submitted"}}]}
    (scratch / "trajectory.json").write_text(json.dumps(trajectory))
    fields = mini.parse(run())
    assert fields["steps"] == 3 and fields["tool_calls"] == {"bash": 2}
    assert fields["malformed"]["format_errors"] == 1 and fields["tool_errors"] == 1
    assert fields["prompt_tokens"] == {"prefilled": 120 + 300 + 300, "cached": 800 + 1200}
    assert fields["decode_tokens"] == 30 + 40 + 40 and fields["stop_reason"] == "Submitted"
    assert fields["decode_tok_s"] is None  # two replies came without timings
    timed = trajectory["messages"][2]["extra"]["response"]
    trajectory["messages"][1]["extra"]["response"] = trajectory["messages"][4]["extra"][
        "response"] = timed
    (scratch / "trajectory.json").write_text(json.dumps(trajectory))
    assert mini.parse(run())["decode_tok_s"] == 100.0  # 90 tokens in 900 ms
    (scratch / "trajectory.json").unlink()  # killed before its first step ended
    killed = mini.parse(run(code=None))
    assert killed["steps"] == 0 and killed["stop_reason"] == "killed_at_wall_limit"


def test_opencode_events_give_steps_tools_and_tokens():
    opencode = OpenCode(base_url=URL, model="m", binary=Path("/x"))
    out = "INFO  booting\n" + lines(
        {"type": "step_start", "part": {}},
        {"type": "tool_use", "part": {"tool": "read", "state": {"status": "completed"}}},
        {"type": "tool_use", "part": {"tool": "edit", "state": {"status": "error"}}},
        {"type": "step_finish", "part": {"tokens": {"input": 500, "output": 20, "reasoning": 0,
                                                    "cache": {"read": 100, "write": 0}}}},
        {"type": "text", "part": {"text": "done"}},
        {"type": "step_finish", "part": {"tokens": {"input": 50, "output": 5,
                                                    "cache": {"read": 600}}}})
    fields = opencode.parse(run(out))
    assert fields["steps"] == 2 and fields["tool_calls"] == {"edit": 1, "read": 1}
    assert fields["tool_errors"] == 1 and fields["decode_tokens"] == 25
    assert fields["prompt_tokens"] == {"prefilled": 550, "cached": 700}
    failed = opencode.parse(run(lines({"type": "error", "error": {
        "name": "APIError", "data": {"message": "Connection refused"}}}), code=1))
    assert failed["error"] == "Connection refused" and failed["stop_reason"] == "exit_1"


def test_qwen_code_stream_json_gives_turns_tools_and_tokens():
    qwen = QwenCode(base_url=URL, model="m", binary=Path("/x"))
    tool_use = {"type": "tool_use", "name": "edit", "input": {}}
    out = lines(
        {"type": "system", "subtype": "init"},
        {"type": "assistant", "message": {"content": [tool_use], "usage": {
            "input_tokens": 400, "output_tokens": 30}}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "is_error": True}]}},
        {"type": "assistant", "message": {"content": [{"type": "text", "text": "ok"}],
                                          "usage": {"input_tokens": 500, "output_tokens": 5}}})
    fields = qwen.parse(run(out))
    assert fields["steps"] == 2 and fields["tool_calls"] == {"edit": 1}
    assert fields["tool_errors"] == 1 and fields["decode_tokens"] == 35
    assert fields["prompt_tokens"] == {"prefilled": 900, "cached": 0}
    result = {"type": "result", "subtype": "error_max_turns", "is_error": True, "num_turns": 7,
              "usage": {"input_tokens": 1000, "output_tokens": 50,
                        "cache_read_input_tokens": 400}}
    fields = qwen.parse(run(out + lines(result), code=1))
    assert fields["steps"] == 7 and fields["error"] == "error_max_turns"
    assert fields["prompt_tokens"] == {"prefilled": 600, "cached": 400}
    # what 0.15.10 printed against SmolLM2's 8192-token context (is_error false, exit 0)
    api = "[API Error: 400 request (9469 tokens) exceeds the available context size (8192 tokens)"
    refused = qwen.parse(run(lines({"type": "result", "subtype": "success", "is_error": False,
                                    "num_turns": 1, "result": api})))
    assert refused["error"] == api and refused["stop_reason"] == "done"


def test_codex_jsonl_gives_tool_calls_and_turn_usage():
    codex = Codex(base_url=URL, model="m", binary=Path("/x"))
    out = lines(
        {"type": "thread.started", "thread_id": "t"}, {"type": "turn.started"},
        {"type": "item.completed", "item": {"type": "reasoning", "text": "hm"}},
        {"type": "item.completed", "item": {"type": "command_execution", "exit_code": 1,
                                            "status": "failed"}},
        {"type": "item.completed", "item": {"type": "file_change", "status": "completed"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "done"}},
        {"type": "turn.completed", "usage": {"input_tokens": 900, "cached_input_tokens": 300,
                                             "output_tokens": 60}})
    fields = codex.parse(run(out))
    assert fields["tool_calls"] == {"apply_patch": 1, "shell": 1} and fields["steps"] == 3
    assert fields["tool_errors"] == 1 and fields["decode_tokens"] == 60
    assert fields["prompt_tokens"] == {"prefilled": 600, "cached": 300}
    failed = codex.parse(run(lines({"type": "turn.failed", "error": {
        "message": "unexpected status 404 Not Found"}}), code=1))
    assert failed["error"] == "unexpected status 404 Not Found"
