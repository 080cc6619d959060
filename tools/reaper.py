"""No orphans: every process the agent starts dies when the agent dies, SIGKILL included.

Why markers and a watchdog: a process group is not enough (a ``setsid`` or double-forked child
leaves it, and after a SIGKILL of the agent nobody is left to kill the group anyway). Instead
every tool process (bash commands, background jobs, MCP stdio servers, the project's tests) is
started with :data:`OWNER_ENV` in its environment, ``<owner>/<session>/<tag>``: the owner is
the agent process (pid and start time, so a reused pid is never mistaken for it), the session
id when known, and a tag unique to that command. Children inherit it, including ``setsid`` and
daemonised ones, and ``/proc/<pid>/environ`` keeps it even after they leave the process group.

With the first marked process a small watchdog starts (:func:`_watch`, in its own session so
Ctrl-C and a closed terminal do not touch it). It holds the read end of a pipe whose write end
only the agent holds; end of file means the agent exited or died, and the watchdog then kills
every process carrying this agent's owner (SIGTERM, a short grace, SIGKILL, rescanning until
none is left) and exits. A finished or timed-out foreground command has the processes carrying
its own tag killed the same way (:func:`kill_tagged`), and ``agent resume`` stops what a dead
run of the same session left behind (:func:`stop_leftovers`).

Limits: a process that re-execs itself with a scrubbed environment (``env -i cmd``) carries no
marker and escapes; processes of other users are not visible. Linux reads ``/proc`` through
psutil; elsewhere psutil's environment reading is used where it works.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from backend.secret_store import clean_environ

OWNER_ENV = "DFLASH_AGENT_OWNER"
GRACE_S = 0.5
"""Seconds between SIGTERM and SIGKILL."""

_lock = threading.Lock()
_session = "-"
_counter = 0
_watchdog: subprocess.Popen | None = None
_watchdog_for: int | None = None
"""The pid that started the watchdog (a forked child needs its own)."""
_write_end: int | None = None


@dataclass(frozen=True)
class Marker:
    """A parsed :data:`OWNER_ENV` value."""

    owner: str
    session: str
    tag: str

    @classmethod
    def parse(cls, value: str) -> Marker | None:
        """The marker in ``value``, or None when it is not one."""
        parts = value.split("/")
        if len(parts) != 3 or not all(parts):
            return None
        return cls(*parts)

    def __str__(self) -> str:
        return f"{self.owner}/{self.session}/{self.tag}"


def _start_stamp(pid: int) -> str | None:
    """When ``pid`` started, exactly (clock ticks since boot on Linux); None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        pass
    try:
        return f"{psutil.Process(pid).create_time():.3f}"
    except psutil.Error:
        return None


def owner_id(pid: int | None = None) -> str:
    """``<pid>-<start>`` of ``pid`` (this process by default)."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{_start_stamp(pid)}"


def owner_alive(owner: str) -> bool:
    """Whether the process ``owner`` names is still running (the same process, not a reuse of
    its pid)."""
    pid, _, stamp = owner.partition("-")
    if not pid.isdigit():
        return False
    try:
        if psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return False
    return _start_stamp(int(pid)) == stamp


def set_session(session_id: str) -> None:
    """Name the session in the markers of processes started from now on."""
    global _session
    _session = session_id.replace("/", "_") or "-"


def new_marker(kind: str) -> str:
    """A fresh marker value for one command (``kind``: bash, job, mcp, …); the watchdog is
    started first, so no marked process ever runs unwatched."""
    global _counter
    with _lock:
        _ensure_watchdog()
        _counter += 1
        return str(Marker(owner_id(), _session, f"{kind.replace('/', '_')}-{_counter}"))


_WATCHDOG = ("import sys; sys.path.insert(0, sys.argv[1]); "
             "from tools.reaper import _watch; _watch(sys.argv[2])")


def _ensure_watchdog() -> None:
    global _watchdog, _watchdog_for, _write_end
    if _watchdog is not None and _watchdog_for == os.getpid() and _watchdog.poll() is None:
        return
    read_end, write_end = os.pipe()  # both close-on-exec: only the watchdog gets read_end
    env = {k: v for k, v in clean_environ().items() if k != OWNER_ENV}
    try:
        _watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(Path(__file__).resolve().parent.parent),
             owner_id()], stdin=read_end, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, cwd="/", env=env, start_new_session=True)
    except OSError:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    if _write_end is not None and _watchdog_for == os.getpid():
        os.close(_write_end)  # the previous watchdog died: let it see EOF if it ever reads
    _watchdog_for, _write_end = os.getpid(), write_end


def watchdog_pid() -> int | None:
    """The watchdog's pid, when one was started by this process."""
    return _watchdog.pid if _watchdog is not None and _watchdog_for == os.getpid() else None


def _marked(match: Callable[[Marker], bool]) -> list[psutil.Process]:
    skip = {os.getpid(), watchdog_pid()}
    found = []
    for proc in psutil.process_iter():
        if proc.pid in skip:
            continue
        try:
            value = proc.environ().get(OWNER_ENV)
        except (psutil.Error, OSError):
            continue
        marker = Marker.parse(value) if value else None
        if marker is not None and match(marker):
            found.append(proc)
    return found


def kill_marked(match: Callable[[Marker], bool], grace: float = GRACE_S,
                rounds: int = 20) -> int:
    """Kill every process whose marker satisfies ``match``: SIGTERM, ``grace`` seconds, then
    SIGKILL for whatever is left or appeared meanwhile (a forking loop), until a scan finds
    none or ``rounds`` scans were made. Returns how many distinct processes were signalled."""
    signalled: set[int] = set()
    for round_ in range(rounds):
        found = _marked(match)
        if not found:
            break
        sig = signal.SIGTERM if round_ == 0 else signal.SIGKILL
        for proc in found:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
        signalled.update(p.pid for p in found)
        psutil.wait_procs(found, timeout=grace if round_ == 0 else 0.2)
    return len(signalled)


def kill_tagged(marker: str) -> int:
    """Kill the processes of one command (those carrying exactly ``marker``)."""
    return kill_marked(lambda m: str(m) == marker)


def stop_leftovers(session_id: str) -> int:
    """Kill what an earlier run of ``session_id`` left running: processes carrying that
    session's marker whose owning agent is gone. Returns how many were stopped."""
    session = session_id.replace("/", "_")
    me = owner_id()
    alive: dict[str, bool] = {}

    def orphaned(marker: Marker) -> bool:
        if marker.session != session or marker.owner == me:
            return False
        if marker.owner not in alive:
            alive[marker.owner] = owner_alive(marker.owner)
        return not alive[marker.owner]

    return kill_marked(orphaned)


def _watch(owner: str) -> None:
    """The watchdog's main: wait for end of file on stdin, then kill ``owner``'s processes."""
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            if not os.read(0, 4096):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    kill_marked(lambda m: m.owner == owner)
    # Once more after a pause: a child the agent had forked but not yet exec'd when it died
    # showed the agent's environment, without the marker, to the first scan.
    time.sleep(1.0)
    kill_marked(lambda m: m.owner == owner)
