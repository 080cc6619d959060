"""A managed server's record and whether its process is provably this home's.

One server per launch plan (binary, model, profile, context…). Its state file
``<state>/servers/<config-hash>.json`` records pid, process start time, port and the plan; its
output goes to ``<config-hash>.log`` beside it (the record names it relative to its folder). A
record counts only while its process is provably this home's server (:func:`is_ours`: same pid
and start time, running the plan's binary, writing to the log beside the record), so a copied
home (a backup restored, a container image) neither adopts, lists nor stops the servers of the
home it came from (issue 28 item 7). ``<servers>/current`` names the server most recently
started or reused.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel

from backend.errors import StatedError
from backend.home import home
from backend.serve.profiles import LaunchPlan


class ServerError(StatedError, RuntimeError):
    """The server could not be started or reached; ``diagnosis`` is a plain one-line cause.

    ``plain``: refused before anything ran (a flag this build lacks), fully said by the
    message; no crash log is written for it.
    """

    def __init__(self, message: str, log: Path | None = None, tail: str = "",
                 plain: bool = False):
        self.log, self.tail, self.plain = log, tail, plain
        super().__init__(message + (f" (server log: {log})" if log else ""))


class ServerState(BaseModel):
    """What we record about a server we started."""

    pid: int
    create_time: float
    start_ticks: int | None = None
    """The process's start in clock ticks after boot (``/proc/PID/stat``), unlike
    ``create_time`` unaffected by changes of the wall clock; None in records written before it
    was recorded, and where there is no ``/proc``."""
    host: str
    port: int
    config_hash: str
    plan: LaunchPlan
    argv: list[str]
    log: Path
    started_at: float
    preset: str | None = None
    request_extra: dict[str, Any] = {}
    """Fields every request to this server must carry (a build's known bug worked around:
    :mod:`backend.serve.quirks`); the agent's client and the bench merge them into each request."""
    speculation: str | None = None
    """The tuned launch's choice and why (:class:`backend.serve.speculation.costs.Tuning`'s line),
    for ``backend status`` and the session; None for untuned profiles."""
    ready_s: float | None = None
    """Seconds from its start to answering ``/health``: what launching it again would cost a
    session (:meth:`backend.serve.speculation.draft_cap.DraftCap.unload_due`); None in records
    written before it was kept."""

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


def config_hash(plan: LaunchPlan) -> str:
    """Stable 16-hex-digit hash of a launch plan."""
    return hashlib.sha256(plan.model_dump_json().encode()).hexdigest()[:16]


def state_path(digest: str) -> Path:
    """The record of the server whose plan hashes to ``digest``."""
    return home().servers / f"{digest}.json"


def read_state(path: Path) -> ServerState | None:
    """The record at ``path``; its log is the one beside it, whatever path it names (a record
    written before logs were relative names the absolute path in the home it was written in,
    which a copy of that home still names)."""
    try:
        state = ServerState.model_validate_json(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return state.model_copy(update={"log": path.with_suffix(".log")})


def write_state(state: ServerState) -> None:
    """Write ``state``'s record atomically, its log named relative to the record's folder, and
    point ``<servers>/current`` at it."""
    path = state_path(state.config_hash)
    tmp = path.with_suffix(".tmp")
    # The log relative to the record's folder: a copied home reads its own log there.
    record = state.model_copy(update={"log": Path(state.log.name)})
    tmp.write_text(record.model_dump_json(indent=2), "utf-8")
    os.replace(tmp, path)
    (home().servers / "current").write_text(state.config_hash, "utf-8")


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot (``/proc/PID/stat`` field 22),
    or None where that cannot be read. psutil's ``create_time`` adds the boot time, which the
    kernel derives from the wall clock in whole seconds: a clock step (NTP, a virtual machine
    resumed) moves it, and so the create time of a running process, by a second or more."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text("ascii", errors="replace")
        return int(stat[stat.rindex(")") + 2:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _same_start(proc: psutil.Process, state: ServerState) -> bool:
    """True when ``proc`` started when the record says its process did (pid reuse aside): by
    the boot-relative start where the record has it, else by the wall-clock create time."""
    if state.start_ticks is not None:
        ticks = start_ticks(proc.pid)
        if ticks is not None:
            return ticks == state.start_ticks
    return abs(proc.create_time() - state.create_time) < 1.0


def is_ours(state: ServerState) -> bool:
    """True when the recorded pid is alive and provably the server this record describes: the
    same start time, running the plan's binary and writing to the record's log. The pid and
    start time alone are not enough: a copy of a home holds the original's records, whose
    processes are alive, but their output goes to the original's logs, not to the copy's."""
    try:
        proc = psutil.Process(state.pid)
        if not _same_start(proc, state) or proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return proc.exe() == os.path.realpath(state.plan.binary) and _writes_to(proc, state.log)
    except psutil.Error:
        return False


def still_running(state: ServerState) -> bool:
    """True when the record's process runs (same pid and start time) even though it is not
    ours (:func:`is_ours`): the record of a copied home names the original's server."""
    try:
        proc = psutil.Process(state.pid)
        return _same_start(proc, state) and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def writes_another_homes_log(state: ServerState) -> bool:
    """True when the record's process (same pid and start time, see :func:`still_running`)
    provably is another home's server: it has a log of the record's name open in another
    folder (the original's log, in a copied home). Only then may its record be forgotten
    while it runs; a process that is neither this nor :func:`is_ours` (its log unreadable,
    replaced or gone, an error reading its files) keeps its record, so a server of ours is
    never left running unrecorded."""
    try:
        proc = psutil.Process(state.pid)
        if not _same_start(proc, state):
            return False
        for opened in proc.open_files():
            path = Path(opened.path)
            if path.name == state.log.name and path.parent != state.log.parent \
                    and not _same_file(path, state.log):
                return True
    except psutil.Error:
        pass
    return False


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def forgettable(state: ServerState) -> bool:
    """True when the record of a process that is not ours may be removed: the process is gone
    (or the pid now names another process), or it is provably another home's server."""
    return not still_running(state) or writes_another_homes_log(state)


def _writes_to(proc: psutil.Process, log: Path) -> bool:
    """True when ``proc`` has ``log`` open (the same file, whatever the path says: a home
    reached through a symbolic link, or moved)."""
    try:
        ours = log.stat()
    except OSError:
        return False
    for opened in proc.open_files():
        try:
            found = os.stat(opened.path)
        except OSError:
            continue
        if (found.st_dev, found.st_ino) == (ours.st_dev, ours.st_ino):
            return True
    return False


@contextlib.contextmanager
def keep_current_marker() -> Iterator[None]:
    """Restore ``<servers>/current`` afterwards: ``up`` points it at each server it starts,
    and ``agent backend down`` must still find the user's own server after a bench, a
    calibration or an acceptance probe started servers of their own."""
    marker = home().ensure().servers / "current"
    before = marker.read_text("utf-8") if marker.is_file() else None
    try:
        yield
    finally:
        if before is None:
            marker.unlink(missing_ok=True)
        else:
            marker.write_text(before, "utf-8")


def current() -> ServerState | None:
    """The server most recently started or reused, if it is still alive."""
    marker = home().servers / "current"
    with contextlib.suppress(OSError):
        state = read_state(state_path(marker.read_text("utf-8").strip()))
        if state is not None and is_ours(state):
            return state
    return None
