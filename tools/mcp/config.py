"""Which MCP servers to use: ``mcpServers`` JSON files, ``${ENV}`` expansion and project trust.

Files, lowest precedence first: the home's ``<config>/mcp.json`` (user scope), then the
repository's ``.mcp.json`` (Claude Code's project file) and ``.agents/mcp.json`` (project scope);
a later file's entry replaces an earlier one of the same name. The format is the one Claude
Desktop, Claude Code and Cursor read: ``{"mcpServers": {NAME: ENTRY}}`` where ENTRY is
``{command, args, env, cwd}`` (stdio) or ``{type: "http", url, headers}`` (streamable HTTP).

Project files come with the repository, so their commands only run after the user trusts that
file's exact contents once (remembered per sha256 in ``<config>/mcp-trust.json``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from backend import secret_store
from backend.home import home
from backend.models.configfile import ConfigFileError, read_config_text

Scope = Literal["user", "project"]
NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class McpConfigError(ValueError):
    """An MCP config file or entry is invalid; the message names the file and the entry."""


@dataclass(frozen=True)
class ServerConfig:
    """One configured MCP server (stdio when ``command`` is set, streamable HTTP when ``url``)."""

    name: str
    source: Path
    scope: Scope
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    startup_timeout: float = 30.0
    """Seconds to connect, handshake and list tools."""
    tool_timeout: float = 120.0
    """Seconds a single tool call may take before it is cancelled."""

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    def describe(self) -> str:
        """The command line or URL, for prompts and listings."""
        if self.command:
            return " ".join([self.command, *self.args])
        return str(self.url)


@dataclass
class McpConfig:
    """The servers to use and the problems found while reading the files."""

    servers: dict[str, ServerConfig] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    """One line per broken file or entry; the other servers are unaffected."""
    project_files: list[Path] = field(default_factory=list)
    """Project files that define at least one server (each needs trust)."""


def user_file() -> Path:
    """The home's ``mcp.json`` (user scope)."""
    return home().config / "mcp.json"


def project_files(repo: Path) -> list[Path]:
    """The project files in precedence order (later wins): ``.mcp.json``, ``.agents/mcp.json``."""
    return [repo / ".mcp.json", repo / ".agents" / "mcp.json"]


def expand(text: str, where: str) -> str:
    """Replace ``${VAR}`` and ``${VAR:-default}`` from the environment the agent was started
    with: a secret moved out of ours at start (``${GITHUB_TOKEN}``) comes from the secret store
    (:func:`backend.secret_store.get`), so a server gets exactly the secrets its entry names.

    Raises :class:`McpConfigError` for an unset variable without a default."""
    def sub(match: re.Match[str]) -> str:
        value = secret_store.get(match.group(1))
        if value is not None:
            return value
        if match.group(2) is not None:
            return match.group(2)
        raise McpConfigError(f"{where}: environment variable {match.group(1)} is not set")
    return _VAR_RE.sub(sub, text)


def _str_map(value: Any, key: str, where: str, env: bool) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise McpConfigError(f"{where}: '{key}' must be an object of strings")
    return {str(k): expand(v, f"{where} {key}.{k}") if env else v for k, v in value.items()}


def _timeout(entry: dict[str, Any], key: str, default: float, where: str) -> float:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise McpConfigError(f"{where}: '{key}' must be a positive number of seconds")
    return float(value)


def parse_entry(name: str, entry: Any, source: Path, scope: Scope,
                env: bool = True) -> ServerConfig:
    """One ``mcpServers`` entry, ``${VAR}`` expanded when ``env``; raises
    :class:`McpConfigError` naming what is wrong."""
    where = f"{source}: server '{name}'"
    if not NAME_RE.match(name):
        raise McpConfigError(f"{where}: names may use letters, digits, '_', '-' and '.' "
                             "(at most 64)")
    if not isinstance(entry, dict):
        raise McpConfigError(f"{where}: the entry must be an object")
    kind = entry.get("type", "http" if "url" in entry else "stdio")
    timeouts = {"startup_timeout": _timeout(entry, "startup_timeout", 30.0, where),
                "tool_timeout": _timeout(entry, "tool_timeout", 120.0, where)}
    if kind in ("http", "streamable-http", "streamableHttp"):
        url = entry.get("url")
        if not isinstance(url, str) or not url:
            raise McpConfigError(f"{where}: an http server needs a 'url'")
        url = expand(url, f"{where} url") if env else url
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise McpConfigError(f"{where}: url '{url}' is not an http(s) URL with a host")
        return ServerConfig(name, source, scope, url=url,
                            headers=_str_map(entry.get("headers"), "headers", where, env),
                            **timeouts)
    if kind == "sse":
        raise McpConfigError(f"{where}: the old SSE transport is not supported; use the "
                             "server's streamable HTTP endpoint with type 'http'")
    if kind != "stdio":
        raise McpConfigError(f"{where}: unknown type '{kind}' (stdio or http)")
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise McpConfigError(f"{where}: a stdio server needs a 'command' (or use 'url' for "
                             "an http server)")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise McpConfigError(f"{where}: 'args' must be a list of strings")
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise McpConfigError(f"{where}: 'cwd' must be a string")
    return ServerConfig(name, source, scope, command=command, args=tuple(args),
                        env=_str_map(entry.get("env"), "env", where, env), cwd=cwd,
                        **timeouts)


def command_problem(server: ServerConfig, base: Path) -> str | None:
    """Why the stdio ``server``'s command cannot be started here, or None when it can (or the
    server is http).

    The lookup is the one ``subprocess`` does when the server starts: a command with a ``/`` is
    a file relative to the server's working directory (its ``cwd``, relative to ``base``, else
    ``base``) that must be executable; a bare name is searched on the ``PATH`` of the server's
    environment (its ``env`` sets PATH, ``${VAR}`` expanded, else the current one)."""
    command = server.command
    if not command:
        return None
    cwd = base / server.cwd if server.cwd else base
    if os.sep in command or (os.altsep and os.altsep in command):
        file = cwd / command
        if not file.is_file():
            return f"command '{command}' does not exist (looked for {file})"
        if not os.access(file, os.X_OK):
            return f"command '{command}' is not executable (chmod +x {file})"
        return None
    search = os.environ.get("PATH", os.defpath)
    if "PATH" in server.env:
        try:
            search = expand(server.env["PATH"], f"server '{server.name}' env.PATH")
        except McpConfigError as exc:
            return str(exc)
    if shutil.which(command, path=search) is None:
        return f"command '{command}' not found on PATH"
    return None


def _read_text(path: Path) -> str:
    """The text of the MCP config file at ``path``: a regular file of at most
    :data:`~backend.models.configfile.MAX_CONFIG_BYTES`, never a FIFO or device (a cloned
    repository's ``.agents/mcp.json`` linking to ``/dev/zero`` would be read until memory ran
    out). Raises ``FileNotFoundError`` when nothing is there, :class:`McpConfigError` else."""
    if not os.path.lexists(path):
        raise FileNotFoundError(path)
    try:
        return read_config_text(path)
    except ConfigFileError as exc:
        raise McpConfigError(str(exc)) from exc


def read_file(path: Path) -> dict[str, Any]:
    """The ``mcpServers`` object of ``path`` ({} when the file does not exist).

    Raises :class:`McpConfigError` for a file that is not a small regular file
    (:func:`_read_text`), unreadable JSON or a wrong shape."""
    try:
        text = _read_text(path)
    except FileNotFoundError:
        return {}
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise McpConfigError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise McpConfigError(f"{path}: expected an object with 'mcpServers'")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise McpConfigError(f"{path}: 'mcpServers' must be an object")
    return servers


def load(repo: Path | None) -> McpConfig:
    """Every configured server; broken files and entries become :attr:`McpConfig.errors`."""
    config = McpConfig()
    sources: list[tuple[Path, Scope]] = [(user_file(), "user")]
    if repo is not None:
        sources += [(p, "project") for p in project_files(repo)]
    for path, scope in sources:
        try:
            entries = read_file(path)
        except McpConfigError as exc:
            config.errors.append(str(exc))
            continue
        if entries and scope == "project":
            config.project_files.append(path)
        for name, entry in entries.items():
            try:
                config.servers[name] = parse_entry(name, entry, path, scope)
            except McpConfigError as exc:
                config.errors.append(str(exc))
    return config


def trust_file() -> Path:
    """Where trusted project files are remembered: path → sha256 of the contents."""
    return home().config / "mcp-trust.json"


def file_digest(path: Path) -> str:
    """sha256 of a config file's bytes (hex); raises as :func:`_read_text`."""
    return hashlib.sha256(_read_text(path).encode("utf-8")).hexdigest()


def _trusted() -> dict[str, str]:
    try:
        data = json.loads(trust_file().read_text("utf-8"))
    except (FileNotFoundError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def is_trusted(path: Path) -> bool:
    """Whether the user trusted exactly the current contents of ``path`` (never a file that
    cannot be read as a config file)."""
    try:
        return _trusted().get(str(path.resolve())) == file_digest(path)
    except (McpConfigError, OSError):
        return False


def trust(path: Path) -> None:
    """Remember the current contents of ``path`` as trusted."""
    data = _trusted()
    data[str(path.resolve())] = file_digest(path)
    target = trust_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=2) + "\n", "utf-8")


def add_server(name: str, entry: dict[str, Any], scope: Scope, repo: Path | None,
               force: bool = False) -> Path:
    """Write ``entry`` as server ``name`` into the user file or ``<repo>/.agents/mcp.json``.

    The entry is checked first (:func:`parse_entry`, and unless ``force`` that its command can
    be found, :func:`command_problem`, relative to the repository or the current directory); a
    project file written here stays trusted when it was new or trusted before (the user wrote
    the change). Raises :class:`McpConfigError` (bad entry, command not found or name taken
    without ``force``, unreadable file)."""
    if scope == "project":
        if repo is None:
            raise McpConfigError("--scope project needs a repository")
        path = repo / ".agents" / "mcp.json"
    else:
        path = user_file()
    server = parse_entry(name, entry, path, scope, env=False)
    data: dict[str, Any] = {}
    trusted_before = not path.exists() or is_trusted(path)
    if path.exists():
        read_file(path)
        data = json.loads(_read_text(path))
    servers = data.setdefault("mcpServers", {})
    if name in servers and not force:
        raise McpConfigError(f"{path}: server '{name}' already exists (use --force to "
                             "replace it)")
    problem = None if force else command_problem(server, repo or Path.cwd())
    if problem:
        raise McpConfigError(f"server '{name}': {problem}; install it or give its full path, "
                             "or add it anyway with --force")
    servers[name] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", "utf-8")
    if scope == "project" and trusted_before:
        trust(path)
    return path


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


@dataclass(frozen=True)
class _Member:
    """Where one ``"key": value`` pair of a JSON object lies in the file's text."""

    key: str
    start: int
    """Index of the key's opening quote."""
    value: int
    """Index of the value's first character."""
    end: int
    """Index just past the value."""


def _members(text: str, open_at: int) -> tuple[list[_Member], int]:
    """The members of the JSON object whose ``{`` is at ``open_at``, and the index of its
    ``}``. ``text`` must already have parsed as JSON (so every step below finds what JSON
    requires there)."""
    decoder = json.JSONDecoder()
    members: list[_Member] = []
    i = _skip_space(text, open_at + 1)
    while text[i] != "}":
        key, after_key = json.decoder.scanstring(text, i + 1)
        value = _skip_space(text, _skip_space(text, after_key) + 1)  # past the ':'
        _, end = decoder.raw_decode(text, value)
        members.append(_Member(key, i, value, end))
        i = _skip_space(text, end)
        if text[i] == ",":
            i = _skip_space(text, i + 1)
    return members, i


def _without_server(text: str, name: str) -> str:
    """``text`` (a parsed ``mcpServers`` file) with every ``name`` entry of ``mcpServers`` cut
    out with the comma that separated it, so each other byte of the file stays as it was.
    Duplicate keys are all cut: JSON readers keep the last, which would bring it back."""
    while True:
        top, _ = _members(text, _skip_space(text, 0))
        block = [m for m in top if m.key == "mcpServers"][-1]
        members, close = _members(text, block.value)
        hits = [k for k, m in enumerate(members) if m.key == name]
        if not hits:
            return text
        k = hits[-1]
        if len(members) == 1:
            text = text[:block.value + 1] + text[close:]
        elif k + 1 < len(members):
            text = text[:members[k].start] + text[members[k + 1].start:]
        else:
            text = text[:members[k - 1].end] + text[members[k].end:]


def _replace_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a crash leaves the old or the new file), keeping
    its permission bits."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, "utf-8")
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def remove_server(name: str, repo: Path | None, scope: Scope | None = None) -> list[Path]:
    """Remove server ``name`` from the file that defines it (of ``scope`` when given: then
    from each of that scope's files that does); returns the files changed.

    Only the entry's text and its separating comma go: other entries, other keys, formatting
    and key order stay byte for byte. A project file that was trusted stays trusted (the user
    made the change). Raises :class:`McpConfigError`, writing nothing, when a file searched
    cannot be read or parsed, when none defines ``name``, or (without ``scope``) when files of
    both scopes do."""
    files = [user_file()] if scope in (None, "user") else []
    if repo is not None and scope in (None, "project"):
        files += project_files(repo)
    holding: list[Path] = []
    for path in files:
        try:
            servers = read_file(path)
        except McpConfigError as exc:
            raise McpConfigError(f"{exc}; nothing was removed (fix the file first)") from exc
        if name in servers:
            holding.append(path)
    if not holding:
        raise McpConfigError(f"no MCP server '{name}' in {', '.join(map(str, files))}")
    if scope is None and len(holding) > 1 and user_file() in holding:
        raise McpConfigError(f"server '{name}' is defined in {' and '.join(map(str, holding))}; "
                             "say which with --scope user or --scope project")
    for path in holding:
        trusted = path != user_file() and is_trusted(path)
        _replace_file(path, _without_server(_read_text(path), name))
        if trusted:
            trust(path)
    return holding
