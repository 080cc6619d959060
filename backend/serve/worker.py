"""``agent backend worker``: an ``rpc-server`` in the foreground on a machine that lends its
memory and compute to a ``llama-server`` elsewhere (:mod:`backend.serve.rpc`).

``rpc-server`` has no authentication and runs whatever tensors and graphs a client sends it, so
the worker binds 127.0.0.1 unless told otherwise, and says what the risk is when it is not.
Its output goes to a log under the state folder: it writes through a block-buffered stdout, so
a terminal would see its lines late; what the user needs (address, protocol, memory) comes
from asking the worker itself once it listens.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import ipaddress
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from backend.engine.registry import Engine
from backend.errors import StatedError
from backend.home import home, private_open
from backend.serve.exits import meaningful_lines
from backend.serve.process import pick_port, server_env
from backend.serve.rpc import WorkerInfo, probe

START_TIMEOUT = 60.0
"""Seconds ``rpc-server`` gets to listen (it initialises its devices first: CUDA takes a few)."""
STOP_TIMEOUT = 10.0


class WorkerError(StatedError, RuntimeError):
    """The worker could not start or ended on its own; the message says why in one line."""

    plain = True


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) only accepts connections from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str) -> str | None:
    """The warning for a worker bound to ``host``, or None on loopback."""
    if is_loopback(host):
        return None
    return (f"this worker listens on {host}: rpc-server has no authentication and runs "
            "whatever tensors and compute graphs any client sends it, so anyone who can reach "
            "this port can use this machine's memory and compute and crash it. Keep it on a "
            "private network (or behind a firewall that admits only the server's address).")


def worker_argv(engine: Engine, host: str, port: int, cache: bool = False,
                threads: int | None = None, devices: str | None = None) -> list[str]:
    """The ``rpc-server`` command line. Raises :class:`WorkerError` when the engine has no
    ``rpc-server`` (built without RPC)."""
    if engine.rpc_server is None or not engine.rpc_server.is_file():
        raise WorkerError(f"engine {engine.key} has no rpc-server (built without RPC); build "
                          "one with `agent backend build --rpc`")
    argv = [str(engine.rpc_server), "--host", host.strip("[]"), "--port", str(port)]
    if threads is not None:
        argv += ["--threads", str(threads)]
    if devices:
        argv += ["--device", devices]
    if cache:
        argv.append("--cache")
    return argv


def _log_path(host: str, port: int) -> Path:
    folder = home().ensure().state / "workers"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{host.strip('[]').replace(':', '_')}-{port}.log"


def _exit_line(code: int, log: Path) -> str:
    """Why ``rpc-server`` ended by itself, from its exit status and log."""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"rpc-server was killed by {name} (log: {log})"
    try:
        text = log.read_text("utf-8", errors="replace")
    except OSError:
        text = ""
    errors = [line.strip() for line in text.splitlines()
              if any(w in line.lower() for w in ("error", "failed", "no devices", "invalid"))]
    cause = errors[-1] if errors else (meaningful_lines(text, 1) or ["no output"])[-1].strip()
    return f"rpc-server exited with status {code}: {cause} (log: {log})"


_PR_SET_PDEATHSIG = 1
"""``prctl`` option: the signal a process gets when its parent dies (Linux)."""


def _as_worker_child() -> None:
    """Run in the forked child before ``rpc-server`` starts (``preexec_fn``).

    SIGPIPE ignored: rpc-server writes to a client that may have gone (a probe that gave up
    while another server held the worker is accepted later, after that server left), and
    with the default action the write killed the worker; ignored, the write fails with EPIPE
    and rpc-server drops that connection. SIGTERM when this worker process dies, even by
    SIGKILL: rpc-server runs in a session of its own (a terminal's Ctrl-C must reach only
    the worker, which stops it cleanly) and would otherwise live on, holding the port."""
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def start(argv: list[str], host: str, port: int) -> tuple[subprocess.Popen, Path, WorkerInfo]:
    """Start ``rpc-server`` in a session of its own and wait until it answers; returns the
    process, its log and what it said about itself. Raises :class:`WorkerError` when it exits
    first or does not listen within :data:`START_TIMEOUT` seconds."""
    log = _log_path(host, port)
    with private_open(log, "w", encoding="utf-8") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=server_env(),
                                start_new_session=True, preexec_fn=_as_worker_child)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    probe_host = "127.0.0.1" if host in ("0.0.0.0", "::", "[::]") else host
    target = f"[{probe_host.strip('[]')}]:{port}" if ":" in probe_host else f"{probe_host}:{port}"
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while True:
            code = proc.poll()
            if code is not None:
                raise WorkerError(_exit_line(code, log))
            info = probe(target)
            if info.reachable:
                return proc, log, WorkerInfo(address, info.protocol, info.devices,
                                             info.problem)
            if time.monotonic() > deadline:
                raise WorkerError(f"rpc-server did not listen on {address} within "
                                  f"{START_TIMEOUT:g} s (log: {log})")
            time.sleep(0.2)
    except BaseException:
        stop(proc)  # also on Ctrl-C while it starts: it runs in a session of its own
        raise


def stop(proc: subprocess.Popen) -> int:
    """SIGTERM the worker's process group (SIGKILL after :data:`STOP_TIMEOUT` s); returns its
    exit status."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            return proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.wait()


def resolve_port(host: str, port: int) -> int:
    """``port``, or a free one for 0. Raises :class:`WorkerError` when ``host`` is not an
    address of this machine or ``port`` is taken (rpc-server would exit with a bare "Failed to
    create server socket")."""
    bind_host = host.strip("[]")
    if port == 0:
        return pick_port(bind_host, 0)
    try:
        family = socket.getaddrinfo(bind_host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.bind((bind_host, port))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise WorkerError(f"port {port} on {host} is already in use (another worker?); "
                              "pass another --port, or --port 0 for a free one") from exc
        raise WorkerError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); --host "
                          "must be an address of this machine") from exc
    return port


def serve(argv: list[str], host: str, port: int, say: Callable[[str], None]) -> None:
    """Run the worker until it is stopped (Ctrl-C or SIGTERM raise ``KeyboardInterrupt`` in the
    caller's handler: :func:`backend.serve.server.interrupt_on_termination`), then stop
    ``rpc-server`` and return. Raises :class:`WorkerError` when it exits by itself."""
    proc, log, info = start(argv, host, port)
    try:
        memory = ", ".join(f"{d.free_mib:.0f} MiB free of {d.total_mib:.0f}"
                           for d in info.devices) or "unknown"
        say(f"worker listening on {info.address} (RPC protocol {info.protocol or 'unknown'}); "
            f"memory: {memory}")
        if info.problem:
            say(f"note: it {info.problem}")
        reach = info.address
        if host.strip("[]") in ("0.0.0.0", "::"):
            reach = f"{socket.gethostname()}:{port} (or another address of this machine)"
        say(f"use it from the server machine: agent backend up --rpc {reach}")
        say(f"log: {log}; Ctrl-C stops it")
        code = proc.wait()
        raise WorkerError(_exit_line(code, log))
    finally:
        stop(proc)
