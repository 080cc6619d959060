"""Field-trial failures of the MCP client and `agent mcp`: each failed before its fix (a banner
on a server's stdout reported only in a log; `agent mcp list` showing tools a session leaves
out as if they were used; no way to remove a server; a malformed tool result or tool definition
from a server crashing the run or failing the whole server; misleading start errors)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import git
import pytest

from tests.scripted import ScriptedModel, reply
from tools.base import ToolContext
from tools.mcp import config as mcp_config
from tools.mcp.config import ServerConfig
from tools.mcp.errors import McpCallError
from tools.mcp.manager import McpManager
from tools.mcp.setup import add_mcp_tools, start_servers
from tools.mcp.state import ServerState
from tools.registry import default_registry
from tools.workspace import Workspace

VENV_BIN = Path(sys.executable).parent
FIXTURES = Path(__file__).parent / "mcp_servers"


def write_user_config(servers: dict) -> Path:
    path = mcp_config.user_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mcpServers": servers}))
    return path


def agent_cli(*args: str) -> subprocess.CompletedProcess:
    """The real ``agent`` command (home from the autouse fixture's environment), no terminal."""
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL,
                          env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"})


def test_a_banner_on_stdout_is_a_warning_naming_the_server_which_is_kept(tmp_path: Path):
    write_user_config({
        "noisy": {"command": sys.executable, "args": [str(FIXTURES / "garbage_server.py")]},
        "time": {"command": str(VENV_BIN / "mcp-server-time")},
        "dies": {"command": sys.executable,
                 "args": ["-c", "print('Welcome to dies v2'); raise SystemExit(1)"]}})
    warnings: list[str] = []
    manager = start_servers(tmp_path, warnings.append, interactive=False)
    assert manager is not None
    try:
        registry = default_registry(Workspace(tmp_path))
        add_mcp_tools(registry, ToolContext(Workspace(tmp_path)), manager, warnings.append)
        shout = registry.call("noisy__shout", {"text": "still works"})
        status = {name: s.status for name, s in manager.servers.items()}
    finally:
        manager.close()
    assert status == {"noisy": "ready", "time": "ready", "dies": "failed"}
    assert not shout.is_error and "STILL WORKS" in shout.text
    noisy = [w for w in warnings if "'noisy'" in w]
    assert len(noisy) == 1, warnings
    assert "2 lines on stdout that are not MCP" in noisy[0]
    assert "'Starting noisy server v1.0 ...'" in noisy[0] and "stderr" in noisy[0]
    dies = [w for w in warnings if "'dies'" in w]
    assert len(dies) == 1 and "failed to start" in dies[0] and "Welcome to dies v2" in dies[0]
    assert not any("'time'" in w for w in warnings)


def test_mcp_list_warns_about_a_banner(tmp_path: Path):
    write_user_config({
        "noisy": {"command": sys.executable, "args": [str(FIXTURES / "garbage_server.py")]}})
    listed = agent_cli("mcp", "list", "--repo", str(tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert "noisy [user, stdio]" in listed.stdout and "status: ready" in listed.stdout
    assert "warning: MCP server 'noisy' printed 2 lines on stdout that are not MCP" \
        in listed.stderr


def test_mcp_list_shows_the_tools_a_session_leaves_out(tmp_path: Path):
    write_user_config({
        "schemas": {"command": sys.executable, "args": [str(FIXTURES / "schema_server.py")]}})
    listed = agent_cli("mcp", "list", "--repo", str(tmp_path))
    assert listed.returncode == 0, listed.stderr
    assert "  tools (1 of 3 used): echo\n" in listed.stdout
    assert "  left out: dangling ($ref '#/$defs/Gone' cannot be resolved)\n" in listed.stdout
    assert "  left out: impossible (the input schema admits no value)\n" in listed.stdout
    as_json = agent_cli("mcp", "list", "--repo", str(tmp_path), "--json")
    row = json.loads(as_json.stdout)["servers"][0]
    assert row["tools"] == ["echo"]
    assert row["left_out"] == [
        {"tool": "dangling", "reason": "$ref '#/$defs/Gone' cannot be resolved"},
        {"tool": "impossible", "reason": "the input schema admits no value"}]


CONFIG = """{
  "theme": "dark",
  "mcpServers": {
    "a": {"command": "a"},
    "b": {
      "command": "b", "args": ["--x"]
    },
    "c": {"command": "c"}
  },
  "other": [1, 2]
}
"""


def test_mcp_remove_takes_out_one_entry_and_keeps_every_other_byte(tmp_path: Path):
    path = mcp_config.user_file()
    path.parent.mkdir(parents=True)
    path.write_text(CONFIG)
    here = ("--repo", str(tmp_path))
    removed = agent_cli("mcp", "remove", "b", *here)
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout == f"removed MCP server 'b' from {path}\n"
    after_b = CONFIG.replace('    "b": {\n      "command": "b", "args": ["--x"]\n    },\n', "")
    assert path.read_text() == after_b
    assert agent_cli("mcp", "remove", "c", *here).returncode == 0
    after_c = after_b.replace(',\n    "c": {"command": "c"}', "")
    assert path.read_text() == after_c
    assert agent_cli("mcp", "remove", "a", *here).returncode == 0
    assert path.read_text() == after_c.replace('{\n    "a": {"command": "a"}\n  }', "{}")
    # An unknown name: one clear line, nothing written.
    before = path.read_bytes()
    unknown = agent_cli("mcp", "remove", "zzz", "--scope", "user")
    assert unknown.returncode == 3
    assert unknown.stderr == f"error: no MCP server 'zzz' in {path}\n"
    assert path.read_bytes() == before


def test_mcp_remove_refuses_a_broken_file_and_asks_which_scope(tmp_path: Path):
    repo = tmp_path / "repo"
    repo.mkdir()
    user = write_user_config({"dup": {"command": "u"}, "keep": {"command": "k"}})
    project = repo / ".agents" / "mcp.json"
    project.parent.mkdir()
    project.write_text(json.dumps({"mcpServers": {"dup": {"command": "p"}}}))
    mcp_config.trust(project)
    both = agent_cli("mcp", "remove", "dup", "--repo", str(repo))
    assert both.returncode == 3 and f"defined in {user} and {project}" in both.stderr
    assert "--scope" in both.stderr
    only_project = agent_cli("mcp", "remove", "dup", "--scope", "project", "--repo", str(repo))
    assert only_project.returncode == 0, only_project.stderr
    assert json.loads(project.read_text()) == {"mcpServers": {}}
    # The user made this change: the file stays trusted.
    assert mcp_config.is_trusted(project)
    assert set(json.loads(user.read_text())["mcpServers"]) == {"dup", "keep"}
    # A file that is not valid JSON is never rewritten.
    user.write_text('{"mcpServers": {"dup": {"command": "u"},}')
    broken = agent_cli("mcp", "remove", "dup", "--repo", str(repo))
    assert broken.returncode == 3 and crash_free(broken)
    assert f"{user}: not valid JSON" in broken.stderr and "nothing was removed" in broken.stderr
    assert user.read_text() == '{"mcpServers": {"dup": {"command": "u"},}'
    bad_scope = agent_cli("mcp", "remove", "dup", "--scope", "team")
    assert bad_scope.returncode == 2 and "--scope must be user or project" in bad_scope.stderr


def crash_free(proc: subprocess.CompletedProcess) -> bool:
    """One ``error:`` line and no traceback."""
    lines = proc.stderr.strip().splitlines()
    return len(lines) == 1 and lines[0].startswith("error: ")


def test_the_stray_line_summary_agrees_in_number():
    """Issue 28 item 13: one stray line read "printed a line on stdout that are not MCP"."""
    state = ServerState(ServerConfig("noisy", Path("test"), "user", command="x"))
    state.stray, state.stray_count = ["Starting v1"], 1
    assert state.stray_summary() == "printed a line on stdout that is not MCP ('Starting v1')"
    state.stray, state.stray_count = ["Starting v1", "ready"], 2
    assert state.stray_summary() == ("printed 2 lines on stdout that are not MCP "
                                     "('Starting v1', 'ready')")


def raw_server(answers: dict) -> dict:
    """A config entry for :file:`mcp_servers/raw_server.py` answering with ``answers``."""
    return {"command": sys.executable,
            "args": [str(FIXTURES / "raw_server.py"), json.dumps(answers)]}


ECHO = {"name": "echo", "inputSchema": {"type": "object", "properties": {
    "text": {"type": "string"}}}}


def test_a_malformed_tool_result_is_a_tool_error_and_the_run_goes_on(tmp_path: Path):
    """Field trial: a tools/call answer the SDK cannot parse (pydantic ValidationError for
    CallToolResult) ended `agent run` with exit 4, internal error."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git.Repo.init(repo)
    write_user_config({"raw": raw_server({"tools": [ECHO], "call": {"content": [
        {"type": "weird", "blob": 1}, {"type": "text", "text": 5}]}})})
    # The run goes on: a command that works, then the final answer (one needs a call of the
    # task's that succeeded: agent/finish.py).
    script = [reply(json.dumps({"tool": "raw__echo", "arguments": {"text": "hi"}})),
              reply(json.dumps({"tool": "bash", "arguments": {"command": "true"}})),
              reply(json.dumps({"tool": "final_answer", "arguments": {"text": "went on"}}))]
    with ScriptedModel(script) as model:
        ran = agent_cli("run", "call echo", "--repo", str(repo), "--base-url", model.url,
                        "--approval", "full-auto", "--json")
    assert ran.returncode == 0, ran.stderr
    events = [json.loads(line) for line in ran.stdout.splitlines()]
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["name"] == "raw__echo" and result["is_error"]
    assert "MCP server 'raw'" in result["text"] and "malformed" in result["text"]
    assert "\n" not in result["text"]
    assert any(e["type"] == "final_answer" or "went on" in json.dumps(e) for e in events)


def test_structured_content_against_the_output_schema_is_a_tool_error(tmp_path: Path):
    """The SDK checks structured content against the tool's outputSchema and raises
    RuntimeError (several lines) when it does not match; that escaped as an internal error."""
    tool = {**ECHO, "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}},
                                     "required": ["n"]}}
    entry = raw_server({"tools": [tool], "call": {"content": [{"type": "text", "text": "x"}],
                                                  "structuredContent": {"n": "x"}}})
    manager = McpManager([ServerConfig("raw", Path("test"), "user", command=entry["command"],
                                       args=tuple(entry["args"]))])
    try:
        manager.start()
        with pytest.raises(McpCallError) as caught:
            manager.call("raw", "echo", {"text": "hi"})
        still_ready = manager.servers["raw"].status
    finally:
        manager.close()
    assert still_ready == "ready"
    message = str(caught.value)
    assert message.startswith("MCP server 'raw' answered echo with a malformed result")
    assert "'x' is not of type 'integer'" in message and "\n" not in message


def fixture_manager(name: str, script: str) -> McpManager:
    """A manager for one fixture server of :file:`mcp_servers/` over stdio."""
    return McpManager([ServerConfig(name, Path("test"), "user", command=sys.executable,
                                    args=(str(FIXTURES / script),))])


def test_a_server_that_never_finishes_a_call_is_not_said_to_answer_malformed(tmp_path: Path):
    """Every RuntimeError from the SDK's call_tool read "answered … with a malformed result";
    a server that answers each round validly with "input required, retry later" made the SDK
    give up with one, and the model was told the server's answer was broken (with advice to
    pass allow_input_required=True, an SDK parameter)."""
    manager = fixture_manager("retry", "retry_server.py")
    try:
        manager.start()
        with pytest.raises(McpCallError) as caught:
            manager.call("retry", "later", {})
        status = manager.servers["retry"].status
        after = manager.call("retry", "ok", {})
    finally:
        manager.close()
    message = str(caught.value)
    assert message == ("MCP server 'retry' did not finish later: it answered 'input required' "
                       "(more input, or retry later) 10 times in a row without a result, so "
                       "the call was given up")
    assert status == "ready" and not after.is_error


def test_a_call_whose_connection_closes_under_it_is_a_lost_connection_not_a_bad_answer(
        tmp_path: Path):
    """A call that goes out just as its server's connection closes (an HTTP server that died
    is noticed by the runner a moment later) gets the SDK's RuntimeError "Client must be used
    within an async context manager", which read as the server's malformed answer; it is the
    lost connection it is, and the server is restarted as after a crash. The window is made
    here by closing the connection the way a restart does, with the status call() saw just
    before."""
    manager = fixture_manager("crashy", "crash_server.py")
    try:
        manager.start()
        state = manager.servers["crashy"]
        client = state.client
        manager._wait(manager._submit(manager._stop(state)))
        state.client, state.status = client, "ready"
        with pytest.raises(McpCallError) as caught:
            manager.call("crashy", "ok", {})
        after = manager.call("crashy", "ok", {})
    finally:
        manager.close()
    message = str(caught.value)
    assert message.startswith("MCP server 'crashy' lost its connection during ok (its stderr: ")
    assert message.endswith("it was restarted, so the call can be tried again (check whether "
                            "it had an effect first)")
    assert "malformed" not in message and not after.is_error


BAD_TOOLS = [ECHO,
             {"name": "arr", "inputSchema": {"type": "array"}},
             {"name": "noschema"},
             {"name": "listprops", "inputSchema": {"type": "object", "properties": []}},
             {"inputSchema": {"type": "object"}}]


def test_an_invalid_tool_definition_leaves_out_that_tool_only(tmp_path: Path):
    """Field trial: one tool the SDK's ListToolsResult rejects made the whole server
    `failed (ValidationError: 9 validation errors …` plus ~30 raw lines, exit 3."""
    write_user_config({"raw": raw_server({"tools": BAD_TOOLS, "call": {"content": [
        {"type": "text", "text": "echoed"}]}})})
    listed = agent_cli("mcp", "list", "--repo", str(tmp_path))
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "  status: ready\n" in listed.stdout
    assert "  tools (1 of 5 used): echo\n" in listed.stdout
    left = [line for line in listed.stdout.splitlines() if line.startswith("  left out:")]
    assert left == [
        "  left out: arr (not a valid MCP tool: inputSchema.type: Input should be 'object')",
        "  left out: noschema (not a valid MCP tool: inputSchema: Field required)",
        "  left out: listprops (not a valid MCP tool: inputSchema.properties: Input should be "
        "a valid dictionary)",
        "  left out: tool 5 (no name) (not a valid MCP tool: name: Field required)"]
    # A session uses the valid tool and warns about each other one.
    warnings: list[str] = []
    manager = start_servers(tmp_path, warnings.append, interactive=False)
    assert manager is not None
    try:
        registry = default_registry(Workspace(tmp_path))
        add_mcp_tools(registry, ToolContext(Workspace(tmp_path)), manager, warnings.append)
        echoed = registry.call("raw__echo", {"text": "x"})
    finally:
        manager.close()
    assert not echoed.is_error and "echoed" in echoed.text
    assert [w for w in warnings if "left out" in w] == [
        "MCP tool 'arr' of server 'raw' left out: not a valid MCP tool: inputSchema.type: "
        "Input should be 'object'",
        "MCP tool 'noschema' of server 'raw' left out: not a valid MCP tool: inputSchema: "
        "Field required",
        "MCP tool 'listprops' of server 'raw' left out: not a valid MCP tool: "
        "inputSchema.properties: Input should be a valid dictionary",
        "MCP tool 'tool 5 (no name)' of server 'raw' left out: not a valid MCP tool: name: "
        "Field required"]


def test_a_malformed_tool_list_fails_the_server_in_one_line(tmp_path: Path):
    """A tools/list answer that is wrong as a whole still fails the server, in one line."""
    write_user_config({"raw": raw_server({"tools": "none"})})
    listed = agent_cli("mcp", "list", "--repo", str(tmp_path))
    assert listed.returncode == 3
    status = next(line for line in listed.stdout.splitlines() if "status:" in line)
    assert status.startswith("  status: failed (malformed answer from the server: "
                             "ListToolsResult: tools: Input should be a valid list")
    assert len(listed.stdout.splitlines()) == 2, listed.stdout


def test_failed_starts_say_why(tmp_path: Path):
    """Field trial: a missing cwd read "command not found: <the folder>"; a server that printed
    text and hung showed only the timeout (the README promises the stray lines); one that
    exited at once gave a bare "MCP error -32000: Connection closed"; binary bytes on stdout a
    raw UnicodeDecodeError."""
    py = sys.executable
    write_user_config({
        "nocwd": {"command": py, "args": ["-c", "pass"], "cwd": str(tmp_path / "gone")},
        "chatty": {"command": py, "startup_timeout": 3, "args": [
            "-c", "import time; print('hello banner', flush=True); time.sleep(60)"]},
        "quits": {"command": "true"},
        "usage": {"command": py, "args": [
            "-c", "import sys; print('starting', file=sys.stderr); "
                  "sys.exit('usage: usage-server --root DIR')"]},
        "binary": {"command": py, "startup_timeout": 10, "args": [
            "-c", "import sys, time; sys.stdout.buffer.write(b'\\xff\\xfe junk\\n'); "
                  "sys.stdout.flush(); time.sleep(60)"]}})
    listed = agent_cli("mcp", "list", "--repo", str(tmp_path))
    assert listed.returncode == 3
    status = {}
    for line in listed.stdout.splitlines():
        if not line.startswith(" "):
            name = line.split()[0]
        elif line.startswith("  status: "):
            status[name] = line.removeprefix("  status: ")
    logs = mcp_config.user_file().parents[1] / "state" / "mcp"
    assert status["nocwd"] == f"failed (working folder (cwd) does not exist: {tmp_path / 'gone'})"
    assert status["chatty"] == (
        f"failed (did not start within 3 s (stderr: {logs / 'chatty.stderr.log'}); it printed "
        "a line on stdout that is not MCP ('hello banner'))")
    closed = "the server closed the connection before answering (it exited, or closed its stdout)"
    assert status["quits"] == f"failed ({closed} (stderr: {logs / 'quits.stderr.log'}))"
    assert status["usage"] == (f"failed ({closed}; its last line on stderr: 'usage: usage-server "
                               f"--root DIR' (stderr: {logs / 'usage.stderr.log'}))")
    assert status["binary"].startswith(
        "failed (the server wrote bytes to stdout that are not UTF-8 JSON (byte 0xff)")
    assert len(listed.stdout.splitlines()) == 10, listed.stdout


def test_a_cloned_mcp_json_linking_to_a_device_or_a_fifo_is_refused_unread(tmp_path: Path):
    """A cloned repository's `.agents/mcp.json` linking to /dev/zero was read until memory ran
    out (its config.toml was, before a9fc0b4), and a FIFO hung the command: both are errors
    naming the file, read nothing, and the user's own servers are still listed."""
    write_user_config({"keep": {"command": "true"}})
    repo = tmp_path / "repo"
    (repo / ".agents").mkdir(parents=True)
    project = repo / ".agents" / "mcp.json"
    for make, said in ((lambda: os.symlink("/dev/zero", project), "a character device"),
                       (lambda: os.mkfifo(project), "a FIFO")):
        make()
        proc = subprocess.run([sys.executable, "-m", "agent", "mcp", "list", "--repo",
                               str(repo)], capture_output=True, text=True, timeout=60,
                              preexec_fn=lambda: resource.setrlimit(
                                  resource.RLIMIT_AS, (2 << 30, 2 << 30)),
                              env={**os.environ, "NO_COLOR": "1"})
        assert f"{project} is {said}" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
        assert "keep" in proc.stdout and "Traceback" not in proc.stderr
        assert not mcp_config.is_trusted(project)
        project.unlink()
