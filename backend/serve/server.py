"""The managed ``llama-server``: launch, wait for health, reuse, stop, diagnose.

One server per launch plan (binary, model, profile, context…). Its state file
``<state>/servers/<config-hash>.json`` records pid, process start time, port and the plan; its
output goes to ``<config-hash>.log`` beside it (the record names it relative to its folder). A
record counts only while its process is provably this home's server (:func:`is_ours`: same pid
and start time, running the plan's binary, writing to the log beside the record), so a copied
home (a backup restored, a container image) neither adopts, lists nor stops the servers of the
home it came from (issue 28 item 7). A server is reused only when, besides, ``/props.model_path``
names the same model. Concurrent ``up`` calls for one plan are serialised by a file lock. A
process we did not start is never signalled.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import psutil
from filelock import FileLock
from pydantic import BaseModel

from backend import secret_store
from backend.cache import record_use
from backend.engine.flavour import binary_devices, binary_facts, detect_flavour
from backend.engine.helpfacts import check_argv
from backend.home import home, private_open
from backend.models.ggufinfo import GgufError, gguf_metadata
from backend.serve.profiles import LaunchPlan, server_argv
from backend.serve.quirks import kv_kernel_note, launch_flags, request_extra
from backend.serve.rpc import (
    RpcError,
    check_workers,
    engine_protocol,
    gone_workers,
    lost_worker_cause,
    probe_all,
)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8642


class ServerError(RuntimeError):
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


def _state_path(digest: str) -> Path:
    return home().servers / f"{digest}.json"


def _read_state(path: Path) -> ServerState | None:
    """The record at ``path``; its log is the one beside it, whatever path it names (a record
    written before logs were relative names the absolute path in the home it was written in,
    which a copy of that home still names)."""
    try:
        state = ServerState.model_validate_json(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    return state.model_copy(update={"log": path.with_suffix(".log")})


def _write_state(state: ServerState) -> None:
    path = _state_path(state.config_hash)
    tmp = path.with_suffix(".tmp")
    # The log relative to the record's folder: a copied home reads its own log there.
    record = state.model_copy(update={"log": Path(state.log.name)})
    tmp.write_text(record.model_dump_json(indent=2), "utf-8")
    os.replace(tmp, path)
    (home().servers / "current").write_text(state.config_hash, "utf-8")


def _start_ticks(pid: int) -> int | None:
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
        ticks = _start_ticks(proc.pid)
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


def _still_running(state: ServerState) -> bool:
    """True when the record's process runs (same pid and start time) even though it is not
    ours (:func:`is_ours`): the record of a copied home names the original's server."""
    try:
        proc = psutil.Process(state.pid)
        return _same_start(proc, state) and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _writes_another_homes_log(state: ServerState) -> bool:
    """True when the record's process (same pid and start time, see :func:`_still_running`)
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


def _forgettable(state: ServerState) -> bool:
    """True when the record of a process that is not ours may be removed: the process is gone
    (or the pid now names another process), or it is provably another home's server."""
    return not _still_running(state) or _writes_another_homes_log(state)


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


def get_json(base_url: str, path: str, timeout: float = 5.0) -> dict:
    """GET ``base_url + path`` as JSON; raises ``httpx2.HTTPError`` or ``ValueError``."""
    resp = httpx2.get(base_url + path, timeout=timeout)
    resp.raise_for_status()
    return resp.json()


def _healthy_same_model(state: ServerState) -> bool:
    try:
        props = get_json(state.base_url, "/props")
    except (httpx2.HTTPError, ValueError):
        return False
    return Path(str(props.get("model_path", ""))).resolve() == state.plan.model.resolve()


def port_is_free(host: str, port: int) -> bool:
    """True when nothing listens on ``host:port`` (we can bind it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(host: str, preferred: int) -> int:
    """``preferred`` when free, else (or for 0) a free port chosen by the OS."""
    if preferred and port_is_free(host, preferred):
        return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


_DIAGNOSES: list[tuple[tuple[str, ...], str]] = [
    (("invalid argument", "unknown argument", "error while handling argument"),
     "llama-server rejected a command-line flag; check the preset's extra_flags"),
    (("failed to open", "no such file", "failed to load model", "error loading model"),
     "the model file could not be loaded (missing or not a valid GGUF); fetch it again with "
     "`agent backend download`"),
    (("out of memory", "failed to allocate", "cudamalloc failed", "unable to allocate"),
     "out of memory; try a smaller --ctx-size or a smaller model"),
    (("couldn't bind", "address already in use"),
     "the port was taken by another process; run `agent backend up` again"),
]


def diagnose(log_text: str) -> str:
    """A plain one-line cause for a server that exited with an error, from its log text."""
    lower = log_text.lower()
    for needles, message in _DIAGNOSES:
        if any(n in lower for n in needles):
            return message
    return _NO_KNOWN_CAUSE


_NO_KNOWN_CAUSE = "no known cause in its log; read its last lines"
_ERROR_LINE = re.compile(r"(^|\s)error:|^error\b", re.IGNORECASE)
"""A line the engine printed as an error (``error: ...``, ``main: error: ...``), not one of
the benign ``failed to find ...`` lines every llama.cpp start prints."""


_REBUILD = ("rebuild the engine for this CPU (`agent backend cache list`, `agent backend cache "
            "rm ENGINE`, then `agent backend build`)")
_SIGNAL_CAUSES: dict[int, tuple[str, str]] = {
    signal.SIGSEGV: ("a segmentation fault (a bug in the engine or a kernel it runs; on Intel "
                     "CPUs with AMX, builds made with -march=native crash here at the "
                     "warm-up)", f"{_REBUILD}; to run it as it is, add \"--no-repack\" to the "
                     "preset's extra_flags"),
    signal.SIGILL: ("an illegal instruction: the engine was built for a CPU with instructions "
                    "this one lacks (a home copied from another machine?)", _REBUILD),
    signal.SIGBUS: ("a bus error: a memory-mapped file went away or shrank (a model file "
                    "rewritten or truncated while in use, or a full disk or /dev/shm)",
                    "fetch the model again (`agent backend download`), check free space, or "
                    "add \"--no-mmap\" to the preset's extra_flags"),
    signal.SIGABRT: ("an abort: an assertion inside llama.cpp failed (its GGML_ASSERT or "
                     "error line is in the log)", "read the log lines above; a smaller "
                     "--ctx-size or another profile often avoids it; report it upstream "
                     "with the log"),
    signal.SIGKILL: ("SIGKILL: usually the kernel's out-of-memory killer (or someone ran kill "
                     "-9)", "use a smaller --ctx-size or model, or free memory"),
}
_NOISE = ("srv ", "slot ", "que ", "main: ", "build_info", "system_info", "print_info",
          "llama_model_loader: - kv", "llama_model_loader: - type")
_ERRORISH = ("error", "failed", "assert", "abort", "terminate", "exception", "fatal")


def meaningful_lines(log_text: str, limit: int = 8) -> list[str]:
    """The log's last ``limit`` non-blank lines, preceded by any earlier error, assertion or
    failure lines (the cause is often above a tail of shutdown noise)."""
    lines = [line.rstrip() for line in log_text.splitlines() if line.strip()
             and not line.startswith("$ ")]
    tail = lines[-limit:]
    errors = [line for line in lines[:-limit] if any(w in line.lower() for w in _ERRORISH)
              and not line.lstrip().startswith(_NOISE)]
    return errors[-4:] + tail


def exit_cause(returncode: int | None, log_text: str,
               oom_killed: bool = False) -> tuple[str, str]:
    """(why ``llama-server`` ended, what to do), each a plain phrase.

    ``returncode`` as :mod:`subprocess` reports it: negative for a signal (``-11`` is
    SIGSEGV); None when unknown. ``oom_killed``: the kernel's OOM killer counted a kill in the
    server's cgroup meanwhile (``memory.events``).
    """
    if oom_killed:
        return ("llama-server was killed by the kernel's out-of-memory killer (the model, its "
                "context and KV cache did not fit in RAM)",
                "use a smaller --ctx-size or model, or free memory")
    if returncode is not None and returncode < 0:
        try:
            sig = signal.Signals(-returncode)
        except ValueError:
            return f"llama-server was killed by signal {-returncode}", "read the log lines"
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            return (f"llama-server was stopped by {sig.name} from outside dflash-agent",
                    "start it again (`agent backend up`)")
        known = diagnose(log_text)
        if known != _NO_KNOWN_CAUSE:
            # It refused something first and crashed on its way out (BeeLlama v0.3.1 does on
            # a configuration it rejects): the refusal is the cause, not the signal's usual one.
            why, _, fix = known.partition("; ")
            return f"llama-server crashed with {sig.name} after it failed: {why}", fix
        error = next((line.strip() for line in log_text.splitlines()
                      if _ERROR_LINE.search(line)), None)
        if error is not None:
            return (f"llama-server crashed with {sig.name} right after it logged an error: "
                    f"'{error[:200]}'", "fix what that line names, then start it again")
        cause, fix = _SIGNAL_CAUSES.get(sig, (sig.name, "read the log lines"))
        return f"llama-server crashed with {sig.name}, {cause}", fix
    known = diagnose(log_text)
    if returncode == 0 and known == _NO_KNOWN_CAUSE:
        # llama-server handles SIGTERM and SIGINT itself ("cleaning up before exit...") and
        # exits 0: a field trial's `kill <pid>` read as "no known cause".
        return ("llama-server shut down cleanly: something outside dflash-agent stopped it "
                "(a SIGTERM or Ctrl-C it handled)", "start it again (`agent backend up`)")
    status = "" if returncode is None else f" with status {returncode}"
    why, _, fix = known.partition("; ")
    return f"llama-server exited{status}: {why}", fix or "read the log lines"


def explain_exit(returncode: int | None, log_text: str, oom_killed: bool = False) -> str:
    """:func:`exit_cause` as one line: ``why; what to do``."""
    return "; ".join(exit_cause(returncode, log_text, oom_killed))


class ExitRecord(BaseModel):
    """What the launcher saw when the server ended (``<state>/servers/<hash>.exit``)."""

    returncode: int
    oom_killed: bool = False


def read_exit(state: ServerState, wait: float = 10.0) -> ExitRecord | None:
    """The server's exit record, waiting up to ``wait`` s for the launcher to write it (it
    does so right after reaping the process, which on a loaded machine took over 2 s); None
    when there is none. Only called once the server is known to be gone."""
    path = state.log.with_suffix(".exit")
    deadline = time.monotonic() + wait
    while True:
        with contextlib.suppress(OSError, ValueError):
            record = ExitRecord.model_validate_json(path.read_text("utf-8"))
            if record is not None:
                return record
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def crash_report(state: ServerState, wait: float = 5.0) -> str | None:
    """When the server of ``state`` is no longer running: why it ended, what to do and the log's
    meaningful last lines; None while it runs. Used while starting and while serving.

    A request that failed because the server is dying can fail before the process is gone
    (its socket closes first): it gets up to ``wait`` s to finish dying.
    """
    deadline = time.monotonic() + wait
    while is_ours(state):
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)
    text = _tail(state.log, 200)
    lines = "\n".join(f"  {line}" for line in meaningful_lines(text))
    return f"{_why_gone(state, text)}\nlast lines of its log ({state.log}):\n{lines}"


def _why_gone(state: ServerState, log_text: str, wait: float = 10.0) -> str:
    """Why the server of ``state`` (known to be gone) ended and what to do, one line.

    A process that is dying is no longer provably ours (its executable and open files leave
    ``/proc`` first) yet still runs for a moment: only a log of another home proves a copy."""
    if _writes_another_homes_log(state):
        return ("its process still runs but writes another home's log (this home is a copy): "
                "it is not this home's server")
    record = read_exit(state, wait)
    return lost_worker_cause(state.plan.rpc, log_text) or explain_exit(
        record.returncode if record else None, log_text, bool(record and record.oom_killed))


def _tail(path: Path, lines: int = 12) -> str:
    try:
        return "\n".join(path.read_text("utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _raise_interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


@contextlib.contextmanager
def interrupt_on_termination() -> Iterator[None]:
    """For the duration, SIGTERM and SIGHUP raise ``KeyboardInterrupt`` like Ctrl-C does.

    Python's default for SIGTERM ends the process at once, skipping the ``finally`` blocks
    that stop the servers a command started for itself (a bench under ``timeout`` left its
    server running with the model in memory). Only the main thread can set handlers; elsewhere
    this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, _raise_interrupt) for sig in (signal.SIGTERM,
                                                                       signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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


def stop(state: ServerState, timeout: float = 15.0, spawned: bool = False) -> None:
    """SIGTERM (then SIGKILL after ``timeout`` s) the server's process group, only if ours
    (:func:`is_ours`; ``spawned``: this call's own launch, which needs only the same pid and
    start time)."""
    if not (_still_running(state) if spawned else is_ours(state)):
        return
    try:
        proc = psutil.Process(state.pid)
        os.killpg(state.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except psutil.TimeoutExpired:
            os.killpg(state.pid, signal.SIGKILL)
            proc.wait(timeout)
    except (psutil.Error, ProcessLookupError, PermissionError):
        pass


def _engine_flags(binary: Path) -> list[str]:
    """The CMake flags of the managed engine ``binary`` belongs to (its ``engine.json``), or []
    for a binary the product did not build."""
    manifest = binary.parent.parent / "engine.json"
    try:
        flags = json.loads(manifest.read_text("utf-8")).get("configure_flags", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [f for f in flags if isinstance(f, str)] if isinstance(flags, list) else []


def _architecture(model: Path) -> str:
    """The model's ``general.architecture`` ('' when the file cannot be read: the server's own
    load error says why)."""
    try:
        arch = gguf_metadata(model).get("general.architecture")
    except (GgufError, OSError):
        return ""
    return arch if isinstance(arch, str) else ""


def launch_argv(plan: LaunchPlan, host: str, port: int) -> list[str]:
    """The argv for ``plan`` translated for the binary's flavour and checked against the
    binary's own ``--help``.

    Raises :class:`ServerError` listing every flag the build would reject, before anything runs.
    """
    return _launch_argv(plan, host, port)[0]


def _launch_argv(plan: LaunchPlan, host: str, port: int) -> tuple[list[str], str | None]:
    """:func:`launch_argv` and the note on the flags a build's known bug added (or None)."""
    try:
        flavour = detect_flavour(plan.binary)
        facts = binary_facts(plan.binary)
        devices = binary_devices(plan.binary) if flavour == "bee-old" else []
    except (OSError, subprocess.SubprocessError) as exc:
        raise ServerError(f"cannot run {plan.binary} --help: {exc}") from exc
    try:
        argv = server_argv(plan, host, port, flavour)
    except ValueError as exc:
        raise ServerError(str(exc), plain=True) from exc
    added, why = launch_flags(plan, flavour, devices)
    at = len(argv) - len(plan.extra_flags)  # before the preset's own extra flags
    argv[at:at] = added
    problems = check_argv(argv, facts)
    if problems:
        raise ServerError(f"this {flavour} llama-server ({plan.binary}) would reject the "
                          "launch command:\n  " + "\n  ".join(problems), plain=True)
    return argv, why


def up(plan: LaunchPlan, *, port: int = DEFAULT_PORT, host: str = DEFAULT_HOST,
       preset: str | None = None, timeout: float = 600.0,
       progress: Callable[[str], None] | None = None,
       speculation: str | None = None) -> tuple[ServerState, bool]:
    """Start the server for ``plan`` or reuse the running one; returns (state, reused).

    ``speculation`` (the tuned draft length's line) is recorded in the state and the log.

    Waits for ``/health`` (503 while the model loads) up to ``timeout`` seconds. Raises
    :class:`ServerError` with a diagnosis and the log path when the process dies or times out,
    and before anything runs when one of the plan's RPC workers is not reachable or speaks
    another RPC protocol (:func:`backend.serve.rpc.check_workers`).
    """
    root = home().ensure().servers
    digest = config_hash(plan)
    with FileLock(str(root / f"{digest}.lock")):
        existing = _read_state(_state_path(digest))
        if existing is not None:
            # A server whose RPC worker went away answers /health while idle and aborts at
            # its next request: it is launched again (the worker check below then names it).
            if is_ours(existing) and _healthy_same_model(existing) \
                    and not lost_workers(existing):
                (root / "current").write_text(digest, "utf-8")
                return existing, True
            if not is_ours(existing) and not _forgettable(existing):
                # Its process runs, and may be ours: forgetting its record would leave it
                # running unrecorded (holding its memory and port) beside a second server.
                raise ServerError(
                    f"llama-server pid {existing.pid} ({existing.base_url}) of this home's "
                    "record still runs but cannot be proven to be this home's server (its "
                    f"log {existing.log} is not the file it writes to); stop it (`kill "
                    f"{existing.pid}`) if it is yours, or remove {_state_path(digest)} to "
                    "leave it running, then try again", plain=True)
            stop(existing)
            _state_path(digest).unlink(missing_ok=True)
        chosen = pick_port(host, port)
        argv, flags_why = _launch_argv(plan, host, chosen)
        if plan.rpc:
            try:
                for line in check_workers(probe_all(plan.rpc), engine_protocol(plan.binary)):
                    if progress:
                        progress(line)
            except RpcError as exc:
                raise ServerError(str(exc), plain=True) from exc
        extra, why = request_extra(detect_flavour(plan.binary), plan.profile,
                                   _architecture(plan.model))
        notes = [n for n in (flags_why, why, kv_kernel_note(plan, _engine_flags(plan.binary)))
                 if n]
        log = root / f"{digest}.log"
        with private_open(log, "w", encoding="utf-8") as out:
            out.write(f"$ {' '.join(argv)}\n")
            for note in notes:
                out.write(f"# dflash-agent workaround: {note}\n")
            if speculation:
                out.write(f"# dflash-agent speculation: {speculation}\n")
        for note in notes:
            if progress:
                progress(f"workaround: {note}")
        pid = _spawn_detached(argv, log)
        try:
            created = psutil.Process(pid).create_time()
        except psutil.Error:
            created = 0.0
        state = ServerState(pid=pid, create_time=created, start_ticks=_start_ticks(pid),
                            host=host, port=chosen,
                            config_hash=digest, plan=plan, argv=argv, log=log,
                            started_at=time.time(), preset=preset, request_extra=extra,
                            speculation=speculation)
        _write_state(state)
        record_use(*[p for p in (plan.binary, plan.model, plan.draft) if p is not None])
        try:
            _wait_healthy(state, timeout, progress)
        except BaseException:
            stop(state, spawned=True)
            _state_path(digest).unlink(missing_ok=True)
            raise
        state = state.model_copy(update={"ready_s": time.time() - state.started_at})
        _write_state(state)
    return state, False


_LAUNCHER = """import subprocess, sys
with open(sys.argv[2], "ab") as log:
    watcher = subprocess.Popen([sys.executable, "-c", *sys.argv[1:]], stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=log, start_new_session=True)
print(watcher.stdout.readline().decode().strip() or "the watcher printed nothing", flush=True)
"""
_WATCHER = """import json, os, signal, subprocess, sys
signal.signal(signal.SIGHUP, signal.SIG_IGN)
def ooms():
    try:
        rel = open("/proc/self/cgroup").read().strip().splitlines()[-1].split(":", 2)[2]
        for line in open("/sys/fs/cgroup" + rel + "/memory.events"):
            if line.startswith("oom_kill "):
                return int(line.split()[1])
    except (OSError, IndexError, ValueError):
        pass
    return None
log_path, exit_path, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
before = ooms()
try:
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, process_group=0)
except OSError as exc:
    print(exc, flush=True)
    sys.exit(1)
print(proc.pid, flush=True)
sys.stdout.close()
code = proc.wait()
after = ooms()
oom = code == -signal.SIGKILL and None not in (before, after) and after > before
with open(exit_path + ".tmp", "w") as out:
    json.dump({"returncode": code, "oom_killed": oom}, out)
os.replace(exit_path + ".tmp", exit_path)
"""


_OWNER_ENV = "DFLASH_AGENT_OWNER"
"""``tools.reaper.OWNER_ENV`` (backend does not import tools): the marker of an agent's tool
processes, which its watchdog kills when the agent ends."""


def server_env() -> dict[str, str]:
    """The environment ``llama-server`` (and its watcher) start with, explicit: ours without
    secrets (:func:`backend.secret_store.clean_environ`), and without an agent's process marker,
    since the server outlives the agent that started it until ``agent backend down``."""
    return {k: v for k, v in secret_store.clean_environ().items() if k != _OWNER_ENV}


def _spawn_detached(argv: list[str], log: Path) -> int:
    """Start ``argv`` detached from us, in its own process group; returns its pid.

    A short-lived launcher starts a watcher in its own session and exits, so neither is ever
    our zombie and the server outlives this process. The watcher is the server's parent: when
    the server ends it writes ``<log>.exit`` (return code or signal, and whether the kernel's
    OOM killer fired), which is how a crash is named (:func:`crash_report`). Raises
    :class:`ServerError` when it cannot start.
    """
    log.with_suffix(".exit").unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, "-c", _LAUNCHER, _WATCHER, str(log),
                           str(log.with_suffix(".exit")), *argv],
                          capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env=server_env())
    if proc.returncode != 0 or not proc.stdout.strip().isdigit():
        reason = ((proc.stdout + proc.stderr).strip().splitlines() or ["no output"])[-1]
        raise ServerError(f"could not start {argv[0]}: {reason}")
    return int(proc.stdout.strip())


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_healthy(state: ServerState, timeout: float,
                  progress: Callable[[str], None] | None) -> None:
    deadline = time.monotonic() + timeout
    said_loading = False
    while time.monotonic() < deadline:
        if not _alive(state.pid):
            report = crash_report(state) or "llama-server exited"
            why, _, lines = report.partition("\n")
            raise ServerError(why, state.log, lines)
        try:
            resp = httpx2.get(state.base_url + "/health", timeout=2.0)
            if resp.status_code == 200:
                return
            if resp.status_code == 503 and progress and not said_loading:
                progress("loading model")
                said_loading = True
        except httpx2.HTTPError:
            pass
        time.sleep(0.2)
    raise ServerError(f"llama-server did not become healthy within {timeout:.0f} s",
                      state.log, _tail(state.log))


def running() -> list[ServerState]:
    """States of servers we started that are still alive; stale state files are removed."""
    return sweep()[0]


def sweep(explain: bool = False) -> tuple[list[ServerState], list[tuple[ServerState, str]]]:
    """(alive, gone): the servers we started whose process runs, and those whose process is
    gone, each with one line saying why it ended (with ``explain``; else empty) and what to do.
    The state files of the gone ones are removed (their logs stay, for the diagnosis). A record
    whose process still runs and is neither provably ours nor provably another home's server is
    in neither list, and stays (see :func:`_writes_another_homes_log`)."""
    alive: list[ServerState] = []
    gone: list[tuple[ServerState, str]] = []
    for path in sorted(home().servers.glob("*.json")):
        state = _read_state(path)
        if state is not None and is_ours(state):
            alive.append(state)
            continue
        if state is not None and not _forgettable(state):
            continue  # runs and may be ours: the record stays (see _writes_another_homes_log)
        if state is not None:
            why = _why_gone(state, _tail(state.log, 200), wait=1.0) if explain else ""
            gone.append((state, why))
        path.unlink(missing_ok=True)
    return alive, gone


def unproven() -> list[ServerState]:
    """Records whose process still runs but is neither provably this home's server nor
    provably another home's: :func:`sweep` keeps them and no verb stops them; ``backend
    status`` and ``backend down`` name them, so a server is never left running unannounced."""
    found = []
    for path in sorted(home().servers.glob("*.json")):
        state = _read_state(path)
        if state is not None and not is_ours(state) and not _forgettable(state):
            found.append(state)
    return found


def unproven_line(state: ServerState) -> str:
    """One line for a record of :func:`unproven`: what runs and what to do."""
    return (f"llama-server pid {state.pid} ({state.base_url}) of this home's record still runs "
            f"but cannot be proven to be this home's server (its log {state.log} is not the "
            f"file it writes to); it is left running: stop it (`kill {state.pid}`) if it is "
            f"yours, or remove {_state_path(state.config_hash)}")


def lost_workers(state: ServerState) -> list[str]:
    """The RPC workers of a running server that nothing listens at any more: llama-server
    notices only at its next request (and then aborts), so an idle server looks healthy."""
    return gone_workers(state.plan.rpc) if state.plan.rpc else []


def lost_workers_line(state: ServerState, lost: list[str]) -> str:
    """One line for a running server whose RPC workers ``lost`` went away: what fails and
    what to do."""
    names = ", ".join(lost)
    return (f"RPC worker {names} of llama-server pid {state.pid} does not listen any more: "
            "the server fails at its next request; start the worker again (`agent backend "
            "worker` on that machine), then `agent backend down` and `agent backend up --rpc "
            f"{','.join(state.plan.rpc)}`")


SLOT_FIELDS = ("parallel", "idle_timeout", "rpc")
"""Plan fields a session does not care about: any number of slots serves it, asleep or not,
with the layers on this machine or spread over RPC workers (the same tokens either way)."""


def plan_differences(wanted: LaunchPlan, running_plan: LaunchPlan) -> list[str]:
    """Names of the plan fields (other than :data:`SLOT_FIELDS`) in which a running server
    differs from ``wanted``; empty when that server can serve it. A ``wanted`` draft length of
    None (a tuned profile not tuned yet) takes whatever length the running server chose: the
    length is re-chosen at the next launch, never under a running session."""
    a, b = wanted.model_dump(), running_plan.model_dump()
    skip = SLOT_FIELDS + (("draft_n_max",) if wanted.draft_n_max is None else ())
    return [name for name in a if name not in skip and a[name] != b[name]]


def compatible(plan: LaunchPlan) -> ServerState | None:
    """A running server of ours that serves ``plan`` though started with other slot settings
    (``agent backend up --parallel 2`` serving a later ``agent run``), most slots first."""
    fits = [s for s in running() if not plan_differences(plan, s.plan)]
    return max(fits, key=lambda s: s.plan.parallel, default=None)


def current() -> ServerState | None:
    """The server most recently started or reused, if it is still alive."""
    marker = home().servers / "current"
    with contextlib.suppress(OSError):
        state = _read_state(_state_path(marker.read_text("utf-8").strip()))
        if state is not None and is_ours(state):
            return state
    return None


def retire(state: ServerState) -> None:
    """Stop ``state``'s server and forget it (its record and its sessions' leases), under its
    launch lock."""
    with FileLock(str(home().servers / f"{state.config_hash}.lock")):
        stop(state)
        _state_path(state.config_hash).unlink(missing_ok=True)
        shutil.rmtree(home().servers / f"{state.config_hash}.users", ignore_errors=True)


def down(all_servers: bool = False) -> list[ServerState]:
    """Stop the current server (or every server we started); returns the stopped states."""
    alive = running()  # also removes the state files of servers that are gone
    targets = alive if all_servers else [s for s in [current()] if s is not None]
    for state in targets:
        retire(state)
    return targets


def describe(state: ServerState) -> dict:
    """Status fields: pid, binary, flavour, model, profile, preset, url, uptime (s), log,
    n_ctx (tokens, from ``/props``), build info, its RPC workers, those of them nothing
    listens at any more (``rpc_lost``) and ``problem``, one line saying so (else None)."""
    try:
        flavour: str = detect_flavour(state.plan.binary)
    except (OSError, subprocess.SubprocessError):
        flavour = "unknown"
    info = {"pid": state.pid, "binary": str(state.plan.binary), "flavour": flavour,
            "model": str(state.plan.model),
            "profile": state.plan.profile, "preset": state.preset, "url": state.base_url,
            "uptime_s": round(time.time() - state.started_at), "log": str(state.log),
            "speculation": state.speculation, "rpc": list(state.plan.rpc)}
    lost = lost_workers(state)
    info["rpc_lost"] = lost
    info["problem"] = lost_workers_line(state, lost) if lost else None
    try:
        props = get_json(state.base_url, "/props")
        info["n_ctx"] = props.get("default_generation_settings", {}).get("n_ctx")
        info["build"] = props.get("build_info")
    except (httpx2.HTTPError, ValueError):
        info["n_ctx"] = None
    return info
