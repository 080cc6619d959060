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
