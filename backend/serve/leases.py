"""Which processes use a managed server.

A session holds a lease on the server it connects to: a file named after its pid in a folder
beside the server's record (``<home>/servers/<config hash>.users/<pid>.json``, with the
process's start time). A command that would relaunch that server (its drafting turned off
while the draft stays loaded: :func:`backend.serve.launch.keep_serving`) leaves it alone while
another live process holds one. A lease ends with its process: a file whose pid is gone, or
now names another process (a pid reused after a reboot), is stale and removed when read; one
that cannot be read counts as stale too. Nothing else is locked: a session that connects
between the check and the relaunch finds its server gone at its first request and is told so
by the client (``ServerUnavailable``), as after any server crash.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import psutil

from backend.home import home
from backend.serve.records import ServerState

_TOLERANCE_S = 0.01
"""psutil reports a process's start time in seconds with ~10 ms resolution."""


def _folder(state: ServerState) -> Path:
    return home().servers / f"{state.config_hash}.users"


def _started(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return None


def hold(state: ServerState, pid: int | None = None) -> Path:
    """Record that process ``pid`` (default: this one) uses ``state``'s server, and remove the
    leases of processes that ended (a server up for weeks serves many sessions); returns the
    lease file. Raises ``OSError`` when the home cannot be written."""
    pid = os.getpid() if pid is None else pid
    folder = _folder(state)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{pid}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": pid, "started": _started(pid)}), "utf-8")
    os.replace(tmp, path)
    holders(state)
    return path


def holders(state: ServerState) -> list[int]:
    """The pids of the live processes holding a lease on ``state``'s server, in order; stale
    and unreadable lease files are removed."""
    live: list[int] = []
    for path in sorted(_folder(state).glob("*.json")):
        try:
            record = json.loads(path.read_text("utf-8"))
            pid, started = int(record["pid"]), float(record["started"])
        except (OSError, ValueError, KeyError, TypeError):
            pid, started = 0, None
        now = _started(pid) if pid > 0 else None
        if now is not None and started is not None and abs(now - started) <= _TOLERANCE_S:
            live.append(pid)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return live
