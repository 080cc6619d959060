"""Skills through the real llama-server with SmolLM2-135M (json protocol): `agent run --skill`
puts the skill body into the request bytes and prefills its tokens, and activating a skill
mid-session leaves the system prompt's bytes (and so the cached prefix) unchanged."""

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest

from agent.config import load_settings
from agent.sessions.repo import RepoSession
from agent.ui import Reporter
from tests.gitrepo import committed_repo

BODY = ("# Haiku writer\n\nWhen asked for a poem, write a haiku: three lines of five, seven "
        "and five syllables, about the sea, then call final_answer with it.\n")



class RecordingProxy:
    """Forwards every request to ``upstream`` and keeps the raw bytes of each request body
    sent to ``/v1/chat/completions`` (what the agent really sent to the real server)."""

    def __init__(self, upstream: str):
        self.bodies: list[bytes] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.path.endswith("/chat/completions"):
                    proxy.bodies.append(body)
                resp = httpx2.request(method, upstream + self.path, content=body or None,
                                      headers={"Content-Type": "application/json"},
                                      timeout=600.0)
                self.send_response(resp.status_code)
                self.send_header("Content-Type", resp.headers.get("content-type", "text/plain"))
                self.send_header("Content-Length", str(len(resp.content)))
                self.end_headers()
                self.wfile.write(resp.content)

            def do_GET(self) -> None:
                self._forward("GET")

            def do_POST(self) -> None:
                self._forward("POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def requests(self) -> list[dict[str, Any]]:
        return [json.loads(b) for b in self.bodies]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def proxy(real_server) -> Iterator[RecordingProxy]:
    server = real_server("baseline")
    p = RecordingProxy(server.base_url)
    yield p
    p.close()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    folder = home / ".agents" / "skills" / "haiku"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: haiku\ndescription: Writes a haiku about the "
                                     "sea. Use when asked for a poem.\n---\n" + BODY)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return Path(committed_repo(tmp_path / "repo", {"README.md": "poems\n"}).working_tree_dir)


def run_cli(*args: str, home: Path, cwd: Path) -> list[dict[str, Any]]:
    env = {**os.environ, "HOME": str(home), "DFLASH_AGENT_HOME": str(home / "agent-home"),
           "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-m", "agent", "run", *args, "--json",
                           "--tool-protocol", "json", "--max-steps", "1",
                           "--approval", "full-auto"],
                          capture_output=True, text=True, timeout=600, cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode in (0, 1), proc.stderr  # 1: the step limit, which is fine here
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def first_turn(events: list[dict[str, Any]]) -> dict[str, Any]:
    return next(e for e in events if e["type"] == "model_turn")["timings"]


def tokens(base_url: str, text: str) -> int:
    return len(httpx2.post(base_url + "/tokenize", json={"content": text},
                           timeout=30.0).json()["tokens"])


def test_run_with_skill_sends_the_body_and_prefills_its_tokens(proxy: RecordingProxy,
                                                               home: Path, repo: Path):
    plain = run_cli("Write a poem.", "--base-url", proxy.url, home=home, cwd=repo)
    assert len(proxy.bodies) == 1
    raw_plain = proxy.bodies[0]
    with_skill = run_cli("Write a poem.", "--skill", "haiku", "--base-url", proxy.url,
                         home=home, cwd=repo)
    assert len(proxy.bodies) == 2
    raw_skill = proxy.bodies[1]
    sent_body = json.dumps(BODY.strip())[1:-1].encode()  # as JSON-escaped in the request
    assert sent_body in raw_skill and sent_body not in raw_plain
    assert b"activate_skill" in raw_plain  # the tool is offered in both
    plain_sys, skill_sys = (json.loads(b)["messages"][0]["content"] for b in proxy.bodies)
    # The catalog may take 5 % of this server's 4 k context: with the bundled skills beside
    # haiku that leaves names without descriptions (tests/test_skills_discovery.py covers the
    # shortening); what matters here is that haiku is listed and the bytes are the same.
    assert plain_sys == skill_sys and "\n- haiku" in plain_sys
    a, b = first_turn(plain), first_turn(with_skill)
    body_tokens = tokens(proxy.url, BODY)
    # The same system prompt and task are cached from the first run; the skill's messages
    # are new tokens the server had to prefill.
    assert b["prompt_n"] >= body_tokens
    assert (b["prompt_n"] + b["cache_n"]) - (a["prompt_n"] + a["cache_n"]) >= body_tokens
    assert b["cache_n"] > 0


def test_mid_session_activation_keeps_the_system_prompt_bytes(proxy: RecordingProxy,
                                                              home: Path, repo: Path):
    settings = load_settings(project=repo, cli={"base_url": proxy.url, "tool_protocol": "json",
                                                "approval": "full-auto", "max_steps": 1})
    session = RepoSession(settings, repo, Reporter(json_mode=True), interactive=False)
    session.agent.max_tokens = 64  # a runaway first reply would only cost time here
    try:
        first = session.run_task("Say hello.")
        session.forced_skills = ["haiku"]  # what `--skill` does, here before the second task
        second = session.run_task("Write a poem.")
    finally:
        session.close()
    requests = proxy.requests()
    assert len(requests) == 2
    system = [json.dumps(r["messages"][0], ensure_ascii=False).encode() for r in requests]
    assert system[0] == system[1]
    assert BODY.strip() not in json.dumps(requests[0]) and "# Haiku writer" in \
        requests[1]["messages"][-1]["content"]
    # Append-only: the first request is a prefix of the second, so the server reuses it.
    assert requests[1]["messages"][:len(requests[0]["messages"])] == requests[0]["messages"]
    t1, t2 = first.timings[-1], second.timings[-1]
    assert t2.cache_n >= tokens(proxy.url, requests[0]["messages"][0]["content"])
    assert t2.prompt_n >= tokens(proxy.url, BODY) and t1.prompt_n is not None
