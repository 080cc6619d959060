"""How the client reaches an MCP server: a stdio process (its environment, working folder and
stderr log) or streamable HTTP; and the SDK's log records kept off the terminal."""

from __future__ import annotations

import logging
import os
from contextlib import AsyncExitStack
from pathlib import Path
from typing import IO, Any

import httpx2

from backend.secret_store import SECRET_NAME, strip_url_credentials
from tools import reaper
from tools.mcp.config import ServerConfig
from tools.mcp.errors import McpStartError
from tools.mcp.state import ServerState, state_dir

BASE_ENV = ("HOME", "LOGNAME", "USER", "PATH", "SHELL", "TERM", "LANG", "LANGUAGE", "LC_ALL",
            "LC_CTYPE", "TZ", "TMPDIR")
"""What a stdio server gets besides its config's ``env``: enough to start, nothing secret."""


def server_env(cfg: ServerConfig) -> dict[str, str]:
    """The whole environment of a stdio server: :data:`BASE_ENV` from ours (URL credentials
    stripped), the config's ``env`` (``${VAR}`` already expanded, from the secret store too),
    and the :mod:`tools.reaper` marker so it dies with the agent.

    Explicit because the SDK merges ``get_default_environment()`` under whatever it is given:
    every name it would add is in :data:`BASE_ENV`, so the result is exactly this dict."""
    from mcp.client.stdio import get_default_environment  # deferred: startup time

    base = {k: os.environ[k] for k in BASE_ENV if k in os.environ}
    base.update(get_default_environment())
    env = {k: strip_url_credentials(v) for k, v in base.items() if not SECRET_NAME.search(k)}
    env.update(cfg.env)
    env[reaper.OWNER_ENV] = reaper.new_marker(f"mcp-{cfg.name}")
    return env


class _SdkLog(logging.Handler):
    """Appends the SDK's records to ``<state>/mcp/sdk.log`` of the home current at the time."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            state_dir().mkdir(parents=True, exist_ok=True)
            with (state_dir() / "sdk.log").open("a", encoding="utf-8") as out:
                out.write(self.format(record) + "\n")
        except OSError:
            self.handleError(record)


def route_sdk_logs() -> None:
    """Keep the SDK's log records (garbage lines, transport tracebacks) off the terminal."""
    logger = logging.getLogger("mcp")
    if any(isinstance(h, _SdkLog) for h in logger.handlers):
        return
    handler = _SdkLog()
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False


async def open_transport(state: ServerState, stack: AsyncExitStack, workspace: Path | None) -> Any:
    """The transport to ``state``'s server, its resources entered on ``stack``: streamable
    HTTP for a URL, else a stdio process started in its config's ``cwd`` (relative to
    ``workspace``, the default) with :func:`server_env` and its stderr appended to
    ``<state>/mcp/<name>.stderr.log``. Raises :class:`McpStartError` for a missing working
    folder."""
    # deferred: startup time
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    cfg = state.config
    if cfg.url:
        http = await stack.enter_async_context(httpx2.AsyncClient(
            headers=cfg.headers, timeout=httpx2.Timeout(30.0, read=cfg.tool_timeout + 30)))
        return streamable_http_client(cfg.url, http_client=http)
    cwd = Path(cfg.cwd) if cfg.cwd else workspace
    if cwd is not None and not cwd.is_absolute() and workspace is not None:
        cwd = workspace / cwd
    if cwd is not None and not cwd.is_dir():
        # The OS reports a missing working folder as the command's FileNotFoundError,
        # naming the folder: "command not found: <folder>" would send the user astray.
        raise McpStartError(f"working folder (cwd) does not exist: {cwd}")
    state_dir().mkdir(parents=True, exist_ok=True)
    state.log = state_dir() / f"{cfg.name}.stderr.log"
    errlog: IO[str] = stack.enter_context(state.log.open("a", encoding="utf-8"))
    state.log_start = errlog.tell()
    params = StdioServerParameters(command=cfg.command or "", args=list(cfg.args),
                                   env=server_env(cfg), cwd=cwd)
    return stdio_client(params, errlog=errlog)
