"""Field-trial failures of the MCP client and `agent mcp`: each failed before its fix (a banner
on a server's stdout reported only in a log; `agent mcp list` showing tools a session leaves
out as if they were used; no way to remove a server)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tools.base import ToolContext
from tools.mcp import config as mcp_config
from tools.mcp.config import ServerConfig
from tools.mcp.manager import ServerState
from tools.mcp.setup import add_mcp_tools, start_servers
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
