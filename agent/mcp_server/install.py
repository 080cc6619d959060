"""``agent mcp install HOST``: the config entry that makes an MCP host start ``agent mcp serve``.

Where and in what shape each host reads its servers (docs/design/mcp-facts.md, the hosts' docs):

- Claude Desktop: ``claude_desktop_config.json`` in the app's config folder, ``mcpServers``;
- Claude Code: ``<project>/.mcp.json``, ``mcpServers``;
- Cursor: ``~/.cursor/mcp.json``, ``mcpServers``;
- VS Code: ``<project>/.vscode/mcp.json``, ``servers`` with a required ``type``;
- Codex: ``~/.codex/config.toml``, ``[mcp_servers.NAME]``.

Writing keeps every other entry; a config that cannot be parsed is never touched.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import platformdirs
import tomlkit

from agent.errors import UserError
from backend.home import HOME_ENV

Host = Literal["claude-desktop", "claude-code", "cursor", "vscode", "codex"]
HOSTS: tuple[str, ...] = ("claude-desktop", "claude-code", "cursor", "vscode", "codex")
DEFAULT_NAME = "dflash-agent"


@dataclass
class Plan:
    """The config file for a host, its text now and with our entry."""

    path: Path
    old: str
    new: str
    snippet: str
    """Only our entry, in the file's format (what the user would paste)."""

    def diff(self) -> str:
        return "".join(difflib.unified_diff(self.old.splitlines(True),
                                            self.new.splitlines(True),
                                            fromfile=str(self.path), tofile=str(self.path)))


def config_path(host: Host, project: Path) -> Path:
    """Where ``host`` reads its MCP servers (``project`` for per-project hosts)."""
    home = Path.home()
    if host == "claude-desktop":
        if sys.platform == "darwin":
            return home / "Library" / "Application Support" / "Claude" / \
                "claude_desktop_config.json"
        return Path(platformdirs.user_config_dir("Claude", appauthor=False, roaming=True)) / \
            "claude_desktop_config.json"
    if host == "claude-code":
        return project / ".mcp.json"
    if host == "cursor":
        return home / ".cursor" / "mcp.json"
    if host == "vscode":
        return project / ".vscode" / "mcp.json"
    return home / ".codex" / "config.toml"


def server_command(roots: list[Path]) -> tuple[str, list[str]]:
    """The absolute command that starts our server, and its arguments."""
    args = ["mcp", "serve"]
    for root in roots:
        args += ["--root", str(root.expanduser().resolve())]
    script = Path(sys.executable).with_name("agent")
    if script.is_file():
        return str(script), args
    found = shutil.which("agent")
    if found:
        return str(Path(found).resolve()), args
    return sys.executable, ["-m", "agent", *args]


def _entry(host: Host, command: str, args: list[str]) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "stdio"} if host == "vscode" else {}
    entry.update(command=command, args=args)
    if os.environ.get(HOME_ENV):
        # A relocated home must reach the server the host starts, or it would use another one.
        entry["env"] = {HOME_ENV: os.environ[HOME_ENV]}
    return entry


def _read_json(path: Path, text: str) -> dict[str, Any]:
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise UserError(f"{path} is not valid JSON (line {exc.lineno}: {exc.msg}); nothing was "
                        "written: fix it, or add the entry shown without --write by hand"
                        ) from None
    if not isinstance(data, dict):
        raise UserError(f"{path} holds a JSON {type(data).__name__}, not an object; nothing "
                        "was written")
    return data


def plan(host: Host, roots: list[Path], project: Path, name: str = DEFAULT_NAME) -> Plan:
    """Our entry for ``host`` merged into its config; raises :class:`UserError` when the
    existing file cannot be read or parsed (it is left as it is)."""
    path = config_path(host, project.expanduser().resolve())
    command, args = server_command(roots)
    entry = _entry(host, command, args)
    try:
        old = path.read_text("utf-8") if path.exists() else ""
    except OSError as exc:
        raise UserError(f"{path} cannot be read ({exc}); nothing was written") from None
    if host == "codex":
        try:
            tomllib.loads(old)
        except tomllib.TOMLDecodeError as exc:
            raise UserError(f"{path} is not valid TOML ({exc}); nothing was written: fix it, "
                            "or add the entry shown without --write by hand") from None
        doc = tomlkit.parse(old)
        servers = doc.setdefault("mcp_servers", tomlkit.table(is_super_table=True))
        if not isinstance(servers, dict):
            raise UserError(f"{path}: mcp_servers is not a table; nothing was written")
        table = tomlkit.table()
        table.update(entry)
        servers[name] = table
        snippet_doc = tomlkit.document()
        snippet_doc["mcp_servers"] = tomlkit.table(is_super_table=True)
        snippet_doc["mcp_servers"][name] = table  # type: ignore[index]
        return Plan(path, old, tomlkit.dumps(doc), tomlkit.dumps(snippet_doc))
    key = "servers" if host == "vscode" else "mcpServers"
    data = _read_json(path, old)
    servers = data.setdefault(key, {})
    if not isinstance(servers, dict):
        raise UserError(f"{path}: \"{key}\" is not an object; nothing was written")
    servers[name] = entry
    snippet = json.dumps({key: {name: entry}}, indent=2) + "\n"
    return Plan(path, old, json.dumps(data, indent=2, ensure_ascii=False) + "\n", snippet)


def write(p: Plan) -> None:
    """Replace the file atomically (a crash leaves the old or the new text, never half)."""
    p.path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=p.path.parent, prefix=f".{p.path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(p.new)
        if p.path.exists():
            os.chmod(tmp, p.path.stat().st_mode & 0o777)
        os.replace(tmp, p.path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
