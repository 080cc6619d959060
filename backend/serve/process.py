"""The server's process: ports, the detached launcher and its watcher (which records how the
server ended), the health wait, and stopping a process group that is provably ours. A process we
did not start is never signalled."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx2
import psutil

from backend import secret_store
from backend.serve.exits import crash_report, log_tail
from backend.serve.records import ServerError, ServerState, is_ours, still_running

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8642


def get_json(base_url: str, path: str, timeout: float = 5.0) -> dict:
    """GET ``base_url + path`` as JSON; raises ``httpx2.HTTPError`` or ``ValueError``."""
    resp = httpx2.get(base_url + path, timeout=timeout)
    resp.raise_for_status()
    return resp.json()


def healthy_same_model(state: ServerState) -> bool:
    """Whether the server of ``state`` answers ``/props`` naming the model its plan names."""
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


def stop(state: ServerState, timeout: float = 15.0, spawned: bool = False) -> None:
    """SIGTERM (then SIGKILL after ``timeout`` s) the server's process group, only if ours
    (:func:`is_ours`; ``spawned``: this call's own launch, which needs only the same pid and
    start time)."""
    if not (still_running(state) if spawned else is_ours(state)):
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


def spawn_detached(argv: list[str], log: Path) -> int:
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


def wait_healthy(state: ServerState, timeout: float,
                 progress: Callable[[str], None] | None) -> None:
    """Wait until the server of ``state`` answers ``/health`` (saying "loading model" through
    ``progress`` once while it loads); raise :class:`ServerError` with the crash report when it
    dies first, or when ``timeout`` s pass."""
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
                      state.log, log_tail(state.log))
