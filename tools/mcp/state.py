"""One MCP server's connection and what is known about it (:class:`ServerState`), and the
quarantine record under the home's state folder (for ``agent mcp list``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import pydantic

from backend.home import home
from tools.mcp.config import ServerConfig
from tools.mcp.errors import describe_error

# The SDK (mcp, mcp_types: ~0.8 s) is imported where a server is connected, so a session or
# command with no MCP server configured never loads it.
if TYPE_CHECKING:
    import mcp_types
    from mcp.client import Client


Status = Literal["starting", "ready", "failed", "quarantined", "stopped"]
STRAY_KEPT = 3
"""Non-protocol stdout lines kept per server for the warning (the rest are only counted)."""


def state_dir() -> Path:
    """``<state>/mcp``: server stderr logs and the quarantine record."""
    return home().state / "mcp"


def quarantine_file() -> Path:
    """JSON lines, one per quarantine: server, reason, session, time."""
    return state_dir() / "quarantines.jsonl"


@dataclass
class ServerState:
    """One server's connection and what is known about it."""

    config: ServerConfig
    status: Status = "starting"
    error: str | None = None
    tools: list[mcp_types.Tool] = field(default_factory=list)
    restarts: int = 0
    client: Client | None = None
    stop: anyio.Event | None = None
    done: anyio.Event | None = None
    log: Path | None = None
    """Where a stdio server's stderr goes."""
    log_start: int = 0
    """The size of :attr:`log` when this start began: what follows is this run's stderr."""
    stray: list[str] = field(default_factory=list)
    """The first :data:`STRAY_KEPT` lines the server wrote to stdout that were not MCP."""
    stray_count: int = 0
    """How many such lines there were in all (they are skipped, the connection goes on)."""
    invalid: dict[str, str] = field(default_factory=dict)
    """Tools whose definition the SDK would reject (tool → why); :class:`ToolScreen`."""
    stderr_tail: str | None = None
    """The last line a stdio server that failed to start wrote to stderr."""

    def note_stray(self, exc: Exception) -> None:
        """Record what the transport could not parse; stdio hands each such stdout line to
        the client as the parse error, whose ``input`` is the line itself."""
        self.stray_count += 1
        if len(self.stray) >= STRAY_KEPT:
            return
        line = describe_error(exc)
        if isinstance(exc, pydantic.ValidationError) and exc.errors():
            raw = exc.errors()[0].get("input")
            line = raw if isinstance(raw, str) else json.dumps(raw, default=str)
        self.stray.append(line if len(line) <= 200 else line[:200] + " …")

    def stray_summary(self) -> str | None:
        """One phrase about the non-MCP stdout lines (None when there were none)."""
        if not self.stray_count:
            return None
        lines = "a line" if self.stray_count == 1 else f"{self.stray_count} lines"
        verb = "is" if self.stray_count == 1 else "are"
        shown = ", ".join(repr(line) for line in self.stray)
        return f"printed {lines} on stdout that {verb} not MCP ({shown})"

    def failure(self) -> str:
        """Why the server failed to start, in one line: the error, its last stderr line and
        where its stderr went, and the non-MCP lines it printed on stdout (a usage message or
        a banner before a crash is often the real reason)."""
        tail = f"; its last line on stderr: {self.stderr_tail!r}" if self.stderr_tail else ""
        log = f" (stderr: {self.log})" if self.log else ""
        stray = self.stray_summary()
        also = f"; it {stray}" if stray else ""
        return f"{self.error or self.status}{tail}{log}{also}"


def read_quarantines() -> dict[str, dict[str, Any]]:
    """The latest quarantine record per server name (from any session)."""
    latest: dict[str, dict[str, Any]] = {}
    try:
        lines = quarantine_file().read_text("utf-8").splitlines()
    except FileNotFoundError:
        return latest
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("server"), str):
            latest[record["server"]] = record
    return latest
