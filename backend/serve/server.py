"""The managed ``llama-server``'s life: launch (the argv translated for the build and checked
against its ``--help``, the build's known bugs worked around), reuse, list, stop and describe.

A server is reused only when its record is provably this home's (:mod:`backend.serve.records`)
and ``/props.model_path`` names the same model. Concurrent ``up`` calls for one plan are
serialised by a file lock. Its process, the watcher and the ports are
:mod:`backend.serve.process`; why it ended, :mod:`backend.serve.exits`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import psutil
from filelock import FileLock

from backend.cache import record_use
from backend.engine.flavour import binary_devices, binary_facts, detect_flavour
from backend.engine.helpfacts import check_argv
from backend.home import home, private_open
from backend.models.ggufinfo import GgufError, gguf_metadata
from backend.serve.exits import log_tail, why_gone
from backend.serve.process import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    get_json,
    healthy_same_model,
    pick_port,
    spawn_detached,
    stop,
    wait_healthy,
)
from backend.serve.profiles import LaunchPlan, server_argv
from backend.serve.quirks import kv_kernel_note, launch_flags, request_extra
from backend.serve.records import (
    ServerError,
    ServerState,
    config_hash,
    current,
    forgettable,
    is_ours,
    read_state,
    start_ticks,
    state_path,
    write_state,
)
from backend.serve.rpc import (
    RpcError,
    check_workers,
    engine_protocol,
    gone_workers,
    probe_all,
)


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
        existing = read_state(state_path(digest))
        if existing is not None:
            # A server whose RPC worker went away answers /health while idle and aborts at
            # its next request: it is launched again (the worker check below then names it).
            if is_ours(existing) and healthy_same_model(existing) \
                    and not lost_workers(existing):
                (root / "current").write_text(digest, "utf-8")
                return existing, True
            if not is_ours(existing) and not forgettable(existing):
                # Its process runs, and may be ours: forgetting its record would leave it
                # running unrecorded (holding its memory and port) beside a second server.
                raise ServerError(
                    f"llama-server pid {existing.pid} ({existing.base_url}) of this home's "
                    "record still runs but cannot be proven to be this home's server (its "
                    f"log {existing.log} is not the file it writes to); stop it (`kill "
                    f"{existing.pid}`) if it is yours, or remove {state_path(digest)} to "
                    "leave it running, then try again", plain=True)
            stop(existing)
            state_path(digest).unlink(missing_ok=True)
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
        pid = spawn_detached(argv, log)
        try:
            created = psutil.Process(pid).create_time()
        except psutil.Error:
            created = 0.0
        state = ServerState(pid=pid, create_time=created, start_ticks=start_ticks(pid),
                            host=host, port=chosen,
                            config_hash=digest, plan=plan, argv=argv, log=log,
                            started_at=time.time(), preset=preset, request_extra=extra,
                            speculation=speculation)
        write_state(state)
        record_use(*[p for p in (plan.binary, plan.model, plan.draft) if p is not None])
        try:
            wait_healthy(state, timeout, progress)
        except BaseException:
            stop(state, spawned=True)
            state_path(digest).unlink(missing_ok=True)
            raise
        state = state.model_copy(update={"ready_s": time.time() - state.started_at})
        write_state(state)
    return state, False


def running() -> list[ServerState]:
    """States of servers we started that are still alive; stale state files are removed."""
    return sweep()[0]


def sweep(explain: bool = False) -> tuple[list[ServerState], list[tuple[ServerState, str]]]:
    """(alive, gone): the servers we started whose process runs, and those whose process is
    gone, each with one line saying why it ended (with ``explain``; else empty) and what to do.
    The state files of the gone ones are removed (their logs stay, for the diagnosis). A record
    whose process still runs and is neither provably ours nor provably another home's server is
    in neither list, and stays (see :func:`writes_another_homes_log`)."""
    alive: list[ServerState] = []
    gone: list[tuple[ServerState, str]] = []
    for path in sorted(home().servers.glob("*.json")):
        state = read_state(path)
        if state is not None and is_ours(state):
            alive.append(state)
            continue
        if state is not None and not forgettable(state):
            continue  # runs and may be ours: the record stays (see writes_another_homes_log)
        if state is not None:
            why = why_gone(state, log_tail(state.log, 200), wait=1.0) if explain else ""
            gone.append((state, why))
        path.unlink(missing_ok=True)
    return alive, gone


def unproven() -> list[ServerState]:
    """Records whose process still runs but is neither provably this home's server nor
    provably another home's: :func:`sweep` keeps them and no verb stops them; ``backend
    status`` and ``backend down`` name them, so a server is never left running unannounced."""
    found = []
    for path in sorted(home().servers.glob("*.json")):
        state = read_state(path)
        if state is not None and not is_ours(state) and not forgettable(state):
            found.append(state)
    return found


def unproven_line(state: ServerState) -> str:
    """One line for a record of :func:`unproven`: what runs and what to do."""
    return (f"llama-server pid {state.pid} ({state.base_url}) of this home's record still runs "
            f"but cannot be proven to be this home's server (its log {state.log} is not the "
            f"file it writes to); it is left running: stop it (`kill {state.pid}`) if it is "
            f"yours, or remove {state_path(state.config_hash)}")


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


def retire(state: ServerState) -> None:
    """Stop ``state``'s server and forget it (its record and its sessions' leases), under its
    launch lock."""
    with FileLock(str(home().servers / f"{state.config_hash}.lock")):
        stop(state)
        state_path(state.config_hash).unlink(missing_ok=True)
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
