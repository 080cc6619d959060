"""The agent's own secrets are out of reach of what it runs: a real ``agent run`` process with
secrets planted in its environment (named ones and URL credentials), driven by the scripted
model, whose bash tool reads ``/proc/$PPID/environ``, ``env`` and ``/proc/self/environ``, and
whose MCP stdio server dumps every environment it can see. Also: a broken hand-off variable is
ignored with a warning, llama-server's spawn environment is explicit, and the places that need
a secret get it from the store."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend import secret_store
from backend.serve.process import spawn_detached
from tests.gitrepo import committed_repo
from tests.scripted import ScriptedModel, reply
from tools.mcp.config import expand
from tools.reaper import OWNER_ENV

AGENT = [sys.executable, "-m", "agent"]
ENV_SERVER = Path(__file__).parent / "mcp_servers" / "env_server.py"


def call(tool: str, **arguments: object) -> dict:
    return reply(json.dumps({"tool": tool, "arguments": arguments}))


def planted() -> tuple[dict[str, str], list[str]]:
    """(variables to plant, the secret strings none of which may show up)."""
    tag = secrets.token_hex(4)
    named = {name: f"planted-{name.lower()}-{tag}" for name in (
        "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "HF_TOKEN",
        "ANTHROPIC_API_KEY", "DB_PASSWORD", "MY_SERVICE_CREDENTIALS", "MCP_ONLY_API_KEY")}
    pw = {k: f"{k}-{tag}" for k in ("pipuser", "pippw", "proxyuser", "proxypw", "ghtok",
                                    "dbuser", "dbpw")}
    urls = {
        "PIP_INDEX_URL": f"https://{pw['pipuser']}:{pw['pippw']}@pypi.example.invalid/simple",
        "HTTPS_PROXY": f"http://{pw['proxyuser']}:{pw['proxypw']}@proxy.example.invalid:3128",
        "PIP_EXTRA_INDEX_URL": f"https://{pw['ghtok']}@git.example.invalid/simple",
        "DATABASE_URL": f"postgres://{pw['dbuser']}:{pw['dbpw']}@db.example.invalid/app",
    }
    return {**named, **urls}, [*named.values(), *pw.values()]


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    committed_repo(tmp_path / "repo", {"app.py": "x = 1\n"}).close()
    return tmp_path / "repo"


PROBE = ("tr '\\0' '\\n' < /proc/$PPID/environ; echo ---; env; echo ---; "
         "cat /proc/self/environ")


def test_planted_secrets_reach_neither_the_bash_tool_nor_an_mcp_server(
        repo: Path, agent_home: Path, tmp_path: Path):
    plant, needles = planted()
    dump = tmp_path / "mcp-env.json"
    (agent_home / "config").mkdir(parents=True)
    (agent_home / "config" / "mcp.json").write_text(json.dumps({"mcpServers": {"envdump": {
        "command": sys.executable, "args": [str(ENV_SERVER)],
        "env": {"ENV_DUMP": str(dump), "SERVICE_KEY": "${MCP_ONLY_API_KEY}"}}}}))
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1",
           "NO_PROXY": "127.0.0.1,localhost", "PLANTED_VISIBLE": "yes", **plant}
    script = [call("bash", command=PROBE), call("final_answer", text="done")]
    with ScriptedModel(script) as model:
        proc = subprocess.run([*AGENT, "run", "look around", "--approval", "full-auto",
                               "--tool-protocol", "json", "--base-url", model.url],
                              cwd=repo, env=env, capture_output=True, text=True, timeout=180,
                              stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    seen = {"agent output": proc.stdout + proc.stderr,
            "model requests": json.dumps(model.requests),
            **{str(p): p.read_text(errors="replace") for p in agent_home.rglob("*.jsonl")}}
    assert any("session" in where for where in seen if where.endswith(".jsonl"))
    for where, text in seen.items():
        leaked = [s for s in needles if s in text]
        assert not leaked, f"{where} shows {leaked}"
    # The probe's output went back to the model: it ran, and it read the agent's environ.
    output = model.requests[1]["messages"][-1]["content"]
    if os.geteuid() == 0:  # non-root cannot read a non-dumpable agent's /proc at all
        assert "PLANTED_VISIBLE=yes" in output, output
    assert "PIP_INDEX_URL=https://pypi.example.invalid/simple" in output, output
    # The MCP server saw exactly what its entry names, ${VAR} expanded from the store.
    seen_by_server = json.loads(dump.read_text())
    assert seen_by_server["environ"]["SERVICE_KEY"] == plant["MCP_ONLY_API_KEY"]
    assert OWNER_ENV in seen_by_server["environ"]
    assert "PLANTED_VISIBLE" not in seen_by_server["environ"]
    everything = json.dumps(seen_by_server).replace(plant["MCP_ONLY_API_KEY"], "")
    leaked = [s for s in needles if s in everything]
    assert not leaked, f"the MCP server sees {leaked}"


@pytest.mark.parametrize("value", ["not-a-number", "0", "987654", "99999999999999999999",
                                   "garbage-file", "pipe-never-closed"])
def test_a_broken_secrets_descriptor_variable_is_ignored_with_a_warning(
        value: str, agent_home: Path, tmp_path: Path):
    fds: list[int] = []
    if value == "garbage-file":
        with (tmp_path / "junk").open("w") as fh:
            fh.write("{not json")
        fd = os.open(tmp_path / "junk", os.O_RDONLY)
        fds, value = [fd], str(fd)
    elif value == "pipe-never-closed":
        read_end, write_end = os.pipe()
        os.write(write_end, b'{"dflash-agent-secrets": 1')
        fds, value = [read_end, write_end], str(read_end)
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home),
           secret_store.FD_ENV: value, "GITHUB_TOKEN": "planted-token"}
    try:
        proc = subprocess.run([*AGENT, "--version"], env=env, capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL, pass_fds=fds)
    finally:
        for fd in fds:
            os.close(fd)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("dflash-agent "), proc.stdout
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"warning: {secret_store.FD_ENV}=") and line.endswith("; ignored")


def test_llama_servers_spawn_environment_holds_no_secret_and_no_agent_marker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GITHUB_TOKEN", "planted-gh")
    monkeypatch.setenv("HTTPS_PROXY", "http://u:planted-pw@proxy.example.invalid:3128")
    monkeypatch.setenv(OWNER_ENV, "1-2/session/bash-1")
    out = tmp_path / "env.txt"
    spawn_detached(["sh", "-c", f"cat /proc/self/environ > {out}.tmp && mv {out}.tmp {out}"],
                    tmp_path / "server.log")
    deadline = time.monotonic() + 30
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    seen = out.read_bytes().decode().split("\0")
    assert "HTTPS_PROXY=http://proxy.example.invalid:3128" in seen
    assert not [v for v in seen if "planted" in v or v.startswith(f"{OWNER_ENV}=")], seen


def test_mcp_config_variables_come_from_the_store_when_moved_out_of_the_environment(
        monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("SOME_SERVICE_TOKEN", raising=False)
    monkeypatch.setitem(secret_store._values, "SOME_SERVICE_TOKEN", "from-the-store")
    assert expand("Bearer ${SOME_SERVICE_TOKEN}", "test") == "Bearer from-the-store"


def test_scrub_removes_names_and_url_credentials_and_is_idempotent():
    env = {"PATH": "/bin", "GITHUB_TOKEN": "t", "PIP_INDEX_URL": "https://u:p@h/simple",
           "NO_PROXY": "a,b", "MIRRORS": "https://tok@a/x http://b/y https://c:d@e:1/"}
    clean, removed = secret_store.scrub(env)
    assert clean == {"PATH": "/bin", "PIP_INDEX_URL": "https://h/simple", "NO_PROXY": "a,b",
                     "MIRRORS": "https://a/x http://b/y https://e:1/"}
    assert removed == {k: env[k] for k in ("GITHUB_TOKEN", "PIP_INDEX_URL", "MIRRORS")}
    assert secret_store.scrub(clean) == (clean, {})
