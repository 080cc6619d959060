"""``agent mcp install HOST [--write]`` as a user runs it, into a temporary HOME: each host's
format and place, other entries kept, a broken config refused and left untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from backend.home import HOME_ENV

AGENT = str(Path(sys.executable).with_name("agent"))

# Where each host keeps its servers, relative to HOME (user hosts) or the project.
PLACES = {
    "claude-desktop": ("home", ".config/Claude/claude_desktop_config.json", "mcpServers"),
    "claude-code": ("project", ".mcp.json", "mcpServers"),
    "cursor": ("home", ".cursor/mcp.json", "mcpServers"),
    "vscode": ("project", ".vscode/mcp.json", "servers"),
    "codex": ("home", ".codex/config.toml", "mcp_servers"),
}
OTHER_JSON = {"command": "npx", "args": ["-y", "some-server"]}


@pytest.fixture
def env(tmp_path: Path, agent_home: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    out = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
    out.update(HOME=str(home), NO_COLOR="1", **{HOME_ENV: str(agent_home)})
    return out


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    path.mkdir()
    return path


def install(host: str, env: dict[str, str], project: Path, *args: str
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([AGENT, "mcp", "install", host, "--root", str(project), *args],
                          capture_output=True, text=True, timeout=120, env=env, cwd=project,
                          stdin=subprocess.DEVNULL)


def config_file(host: str, env: dict[str, str], project: Path) -> Path:
    where, rel, _ = PLACES[host]
    return (Path(env["HOME"]) if where == "home" else project) / rel


def read(path: Path) -> dict:
    text = path.read_text("utf-8")
    return tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)


@pytest.mark.parametrize("host", list(PLACES))
def test_write_adds_our_entry_and_keeps_the_others(host: str, env: dict[str, str],
                                                   project: Path, agent_home: Path):
    path = config_file(host, env, project)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = PLACES[host][2]
    if host == "codex":
        original = ('# my codex settings\nmodel = "o4"\n\n[mcp_servers.other]\n'
                    'command = "npx"\nargs = ["-y", "some-server"]\n')
    else:
        other = {**OTHER_JSON, "type": "stdio"} if host == "vscode" else OTHER_JSON
        original = json.dumps({"theme": "dark", key: {"other": other}}, indent=4)
    path.write_text(original, "utf-8")

    proc = install(host, env, project, "--write")
    assert proc.returncode == 0, proc.stderr
    assert f"+++ {path}" in proc.stdout and "dflash-agent" in proc.stdout
    data = read(path)
    servers = data[key]
    assert set(servers) == {"other", "dflash-agent"}
    assert servers["other"]["command"] == "npx"
    entry = servers["dflash-agent"]
    assert Path(entry["command"]).is_absolute() and Path(entry["command"]).is_file()
    assert entry["args"] == ["mcp", "serve", "--root", str(project.resolve())]
    assert entry["env"] == {HOME_ENV: str(agent_home)}
    if host == "vscode":
        assert entry["type"] == "stdio"
    if host == "codex":
        assert data["model"] == "o4"
        assert path.read_text("utf-8").startswith("# my codex settings\n")
    else:
        assert data["theme"] == "dark"
    # The written command really starts our server (it answers --help).
    started = subprocess.run([entry["command"], *entry["args"][:2], "--help"],
                             capture_output=True, text=True, timeout=60, env=env)
    assert started.returncode == 0 and "--root" in started.stdout

    again = install(host, env, project, "--write")
    assert again.returncode == 0 and "already has this entry" in again.stderr


@pytest.mark.parametrize("host", list(PLACES))
def test_without_write_it_prints_the_entry_and_writes_nothing(host: str, env: dict[str, str],
                                                             project: Path):
    proc = install(host, env, project)
    assert proc.returncode == 0, proc.stderr
    path = config_file(host, env, project)
    assert str(path) in proc.stderr
    assert not path.exists()
    data = tomllib.loads(proc.stdout) if host == "codex" else json.loads(proc.stdout)
    assert list(data[PLACES[host][2]]) == ["dflash-agent"]


@pytest.mark.parametrize("host", list(PLACES))
def test_a_broken_config_is_refused_and_left_untouched(host: str, env: dict[str, str],
                                                      project: Path):
    path = config_file(host, env, project)
    path.parent.mkdir(parents=True, exist_ok=True)
    broken = '[mcp_servers\ncommand = "x"\n' if host == "codex" else \
        '{"mcpServers": {"other": {"command": "npx",}}'
    path.write_text(broken, "utf-8")
    proc = install(host, env, project, "--write")
    assert proc.returncode == 3
    assert str(path) in proc.stderr and "nothing was written" in proc.stderr
    assert ("not valid TOML" if host == "codex" else "not valid JSON") in proc.stderr
    assert path.read_text("utf-8") == broken
    assert not [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]


def test_wrong_shapes_and_unknown_hosts_are_refused(env: dict[str, str], project: Path):
    path = config_file("cursor", env, project)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"mcpServers": ["not", "an", "object"]}', "utf-8")
    proc = install("cursor", env, project, "--write")
    assert proc.returncode == 3 and '"mcpServers" is not an object' in proc.stderr
    path.write_text("[1, 2]", "utf-8")
    proc = install("cursor", env, project, "--write")
    assert proc.returncode == 3 and "not an object" in proc.stderr
    assert path.read_text("utf-8") == "[1, 2]"
    proc = install("emacs", env, project)
    assert proc.returncode == 2 and "unknown host 'emacs'" in proc.stderr


def test_a_root_that_is_no_folder_is_refused(env: dict[str, str], project: Path):
    """A field trial: `install codex --root /root/nonexist` printed an entry whose server
    then failed at every start ("workspace root ... is not a directory")."""
    missing = project / "nonexistent"
    proc = install("codex", env, project, "--root", str(missing))
    assert proc.returncode == 2, proc.stderr
    assert f"--root {missing}: not a folder" in proc.stderr and proc.stdout == ""
