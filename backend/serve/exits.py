"""Why a managed server ended and what to do: the signal or exit status its watcher recorded
(``<hash>.exit``), the cause its log names, and the log's meaningful last lines."""

from __future__ import annotations

import contextlib
import re
import signal
import time
from pathlib import Path

from pydantic import BaseModel

from backend.serve.records import ServerState, is_ours, writes_another_homes_log
from backend.serve.rpc import (
    lost_worker_cause,
)

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
    text = log_tail(state.log, 200)
    lines = "\n".join(f"  {line}" for line in meaningful_lines(text))
    return f"{why_gone(state, text)}\nlast lines of its log ({state.log}):\n{lines}"


def why_gone(state: ServerState, log_text: str, wait: float = 10.0) -> str:
    """Why the server of ``state`` (known to be gone) ended and what to do, one line.

    A process that is dying is no longer provably ours (its executable and open files leave
    ``/proc`` first) yet still runs for a moment: only a log of another home proves a copy."""
    if writes_another_homes_log(state):
        return ("its process still runs but writes another home's log (this home is a copy): "
                "it is not this home's server")
    record = read_exit(state, wait)
    return lost_worker_cause(state.plan.rpc, log_text) or explain_exit(
        record.returncode if record else None, log_text, bool(record and record.oom_killed))


def log_tail(path: Path, lines: int = 12) -> str:
    """The last ``lines`` lines of the log at ``path`` (empty when it cannot be read)."""
    try:
        return "\n".join(path.read_text("utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
