"""The agent's own secrets, kept out of every environment that what it runs can read.

Why a re-exec: filtering the environment handed to a tool is not enough, because Linux keeps
the environment a process was *exec'd* with in ``/proc/<pid>/environ``, readable by every
process of the same user (``tr '\\0' '\\n' < /proc/$PPID/environ`` from the bash tool printed
them all). Deleting from ``os.environ`` does not change that page. So :func:`start`, run first
thing by the CLI entry point, re-execs the process (``os.execve``: same pid, same argv) with a
clean environment when it finds secrets: secret-looking names (:data:`SECRET_NAME`) removed and
``scheme://user:pass@`` credentials stripped from every value. The removed values travel to the
new image through an inherited memfd (a pipe where there is no ``memfd_create``) whose number
is the one variable :data:`FD_ENV`; the new image reads it once, closes it and keeps the
values here, in memory only. The process is then marked non-dumpable, so same-user processes
cannot read its memory through ``/proc/<pid>/mem`` either (root still can: the bash tool in
full-auto is not a sandbox).

Where the store lives: here, in ``backend``, because both ``backend`` (``HF_TOKEN`` for hub
downloads, credentials for ``pip download``) and ``tools`` (``${VAR}`` in MCP configs, the bash
tool's filter) need it and neither may import ``agent``. Code that legitimately needs a secret
asks :func:`get` (or :func:`original_environ` for a fetch subprocess the agent itself runs,
:func:`pip_environ` for pip);
nothing is ever put back into ``os.environ``.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import stat
import sys
from collections.abc import Iterator, Mapping

SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE",
                         re.IGNORECASE)
"""Environment variable names treated as secrets (the whole value is removed)."""
_URL_CREDENTIALS = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]+@")
"""The userinfo of a URL: ``user:pass@`` or a bare token ``ghp_x@`` (both are credentials)."""
FD_ENV = "DFLASH_AGENT_SECRETS_FD"
"""The descriptor number of the hand-off from the previous image (or from a parent agent)."""
_MAGIC = "dflash-agent-secrets"
_MAX_BYTES = 16 * 2**20
_PR_SET_DUMPABLE = 4

_values: dict[str, str] = {}


def strip_url_credentials(text: str) -> str:
    """``text`` with the ``user:pass@`` part of every URL in it removed."""
    return _URL_CREDENTIALS.sub(r"\1", text)


def scrub(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """Split an environment into (clean, removed): secret-looking names go, URL credentials are
    stripped from the other values; ``removed`` holds the original value of every changed or
    dropped variable. Idempotent: scrubbing a clean environment removes nothing."""
    clean: dict[str, str] = {}
    removed: dict[str, str] = {}
    for name, value in env.items():
        if SECRET_NAME.search(name):
            removed[name] = value
            continue
        stripped = strip_url_credentials(value)
        if stripped != value:
            removed[name] = value
        clean[name] = stripped
    return clean, removed


def get(name: str) -> str | None:
    """The original value of environment variable ``name``: the one the agent was started with
    when it was moved out of the environment, else the current one (None when unset)."""
    return _values.get(name, os.environ.get(name))


def original_environ() -> dict[str, str]:
    """The environment with the secrets back, for the agent's own fetch processes only (``pip
    download`` from a private index, ``git clone`` through an authenticating proxy); never for
    anything a model or a project controls."""
    env = {k: v for k, v in os.environ.items() if k != FD_ENV}
    env.update(_values)
    return env


def clean_environ() -> dict[str, str]:
    """The current environment scrubbed (:func:`scrub`), for long-lived helpers such as
    ``llama-server``: explicit, so no secret reaches them even when :func:`start` was not run
    (the library used in-process)."""
    return {k: v for k, v in scrub(os.environ)[0].items() if k != FD_ENV}


_PIP_NAMES = re.compile(r"^(PIP_.*|(HTTPS?|ALL|NO)_PROXY|NETRC)$", re.IGNORECASE)
"""What pip itself reads for its index and network: kept with their credentials."""


def pip_environ() -> dict[str, str]:
    """The environment of a pip the agent runs (``pip download``, ``pip install``): the
    scrubbed one (:func:`clean_environ`) with only pip's own settings given back whole
    (``PIP_*``, the proxies, ``NETRC``: a private index or proxy keeps its credentials).
    Never ``HF_TOKEN`` or the agent's other secrets: pip runs the build code of the sdists it
    fetches or installs, and any same-user process can read pip's ``/proc/PID/environ``."""
    env = clean_environ()
    env.update({k: v for k, v in original_environ().items() if _PIP_NAMES.match(k)})
    return env


def remember(values: Mapping[str, str]) -> None:
    """Keep ``values`` (name → original value) in the store."""
    _values.update(values)


def _nondumpable() -> None:
    """Forbid same-user ptrace and ``/proc/<pid>/mem`` reads of this process (Linux)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _handoff_fd(values: Mapping[str, str]) -> int:
    """An inheritable descriptor holding ``values`` from its start; raises OSError (e.g. a pipe
    too small for them)."""
    data = json.dumps({_MAGIC: 1, "values": dict(values)}).encode("utf-8")
    if hasattr(os, "memfd_create"):
        # No MFD_CLOEXEC: the descriptor must survive the exec.
        fd = os.memfd_create(_MAGIC, 0)
        try:
            _write_all(fd, data)
            os.lseek(fd, 0, os.SEEK_SET)
        except OSError:
            os.close(fd)
            raise
    else:
        read_end, write_end = os.pipe()
        try:
            # Non-blocking: nobody reads before the exec, so a full pipe would hang us.
            os.set_blocking(write_end, False)
            _write_all(write_end, data)
        except OSError:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        fd = read_end
    os.set_inheritable(fd, True)
    return fd


@contextlib.contextmanager
def handoff() -> Iterator[tuple[dict[str, str], tuple[int, ...]]]:
    """Hand the store to a child that is the agent itself (an MCP-started task's worker):
    yields (environment variables to add, descriptors to pass with ``pass_fds``); the child
    calls :func:`receive`. Nothing is handed when the store is empty."""
    if not _values:
        yield {}, ()
        return
    fd = _handoff_fd(_values)
    try:
        yield {FD_ENV: str(fd)}, (fd,)
    finally:
        os.close(fd)


def _read(fd: int, pipe: bool) -> bytes:
    if pipe:
        # A pipe whose writer is still alive must not hang the start.
        os.set_blocking(fd, False)
    else:
        os.lseek(fd, 0, os.SEEK_SET)
    chunks, size = [], 0
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            raise ValueError("its data has no end") from None
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > _MAX_BYTES:
            raise ValueError("it holds too much data")
        chunks.append(chunk)


def receive() -> str | None:
    """Take the hand-off named by :data:`FD_ENV` (if any) into the store, close it and drop
    the variable. Returns None, or a one-line warning when the variable is not a hand-off (not
    a number, not open, not ours): it is ignored and the start goes on."""
    raw = os.environ.pop(FD_ENV, None)
    if raw is None:
        return None
    problem = f"{FD_ENV}={raw!r} is not a secrets hand-off from dflash-agent"
    try:
        fd = int(raw)
    except ValueError:
        return f"{problem} (not a descriptor number); ignored"
    if fd < 3:
        return f"{problem} (standard streams are never one); ignored"
    try:
        mode = os.fstat(fd).st_mode
    except (OSError, OverflowError):
        return f"{problem} (no such open descriptor); ignored"
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        # Left open: a socket or terminal under that number is someone else's.
        return f"{problem} (not a memfd or a pipe); ignored"
    try:
        data = _read(fd, pipe=stat.S_ISFIFO(mode))
    except (OSError, ValueError) as exc:
        return f"{problem} ({getattr(exc, 'strerror', None) or exc}); ignored"
    finally:
        os.close(fd)
    try:
        payload = json.loads(data)
        values = payload["values"] if payload.get(_MAGIC) == 1 else None
    except (ValueError, AttributeError, KeyError, TypeError):
        values = None
    if not isinstance(values, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in values.items()):
        return f"{problem} (unreadable contents); ignored"
    remember(values)
    _nondumpable()
    return None


def start() -> None:
    """Run first by the CLI: take a hand-off, then re-exec without secrets when the
    environment still holds any (see the module docstring). Returns in the clean image.

    When the re-exec is impossible (no ``sys.executable``, no descriptor for the hand-off,
    ``execve`` failing) the secrets are still moved out of ``os.environ`` so no child gets
    them, with a warning that ``/proc/<pid>/environ`` keeps them."""
    warning = receive()
    if warning:
        print(f"warning: {warning}", file=sys.stderr, flush=True)
    came_from_reexec = bool(_values) and warning is None
    clean, removed = scrub(os.environ)
    if not removed:
        return
    reason = "the re-exec already happened (a bug)" if came_from_reexec else None
    if reason is None and not (sys.executable and sys.orig_argv):
        reason = "the Python executable or its command line is unknown"
    if reason is None:
        try:
            fd = _handoff_fd({**_values, **removed})
        except OSError as exc:
            reason = f"no descriptor for the hand-off ({exc})"
        else:
            sys.stdout.flush()
            sys.stderr.flush()
            try:
                os.execve(sys.executable, list(sys.orig_argv), {**clean, FD_ENV: str(fd)})
            except OSError as exc:
                os.close(fd)
                reason = f"execve failed ({exc})"
    remember(removed)
    for name in removed:
        if name in clean:
            os.environ[name] = clean[name]
        else:
            del os.environ[name]
    _nondumpable()
    print(f"warning: could not restart without secrets in the environment ({reason}); they "
          "are kept from commands and tools, but /proc of this process still shows them",
          file=sys.stderr, flush=True)
