"""``agent backend doctor``: is this machine ready to build and serve models, and if not, what
to do. Each check returns ok, warn or fail with a detail line and, when not ok, the next step.

Thresholds: the disk check fails below ``min_free_mib`` (default :data:`MIN_FREE_DISK_MIB`, or
``$DFLASH_AGENT_MIN_FREE_DISK_MIB``) and warns below :data:`WARN_FREE_DISK_MIB`, the size of a
31B Q4 model with its draft; the RAM check warns below :data:`WARN_RAM_MIB` available.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx2

from backend import machine
from backend.cache import list_cache
from backend.engine.build import default_engine
from backend.engine.flavour import detect_flavour
from backend.engine.registry import Engine, unusable_engines
from backend.home import home
from backend.models.presets import SMALL_PRESET, PresetError, get_preset
from backend.serve.exits import exit_cause, meaningful_lines
from backend.serve.preset_status import cached_file
from backend.serve.process import DEFAULT_HOST, pick_port, server_env
from backend.serve.profiles import LaunchPlan
from backend.serve.records import ServerError
from backend.serve.server import launch_argv, running

Status = Literal["ok", "warn", "fail"]
MIB = 2**20
MIN_FREE_DISK_ENV = "DFLASH_AGENT_MIN_FREE_DISK_MIB"
MIN_FREE_DISK_MIB = 2048
"""Below this the engine build (about 1 GiB with its build tree) or a small model will not fit."""
WARN_FREE_DISK_MIB = 20 * 1024
WARN_RAM_MIB = 2048


@dataclass(frozen=True)
class Check:
    """One finding."""

    name: str
    status: Status
    detail: str
    fix: str = ""
    """What to do; empty when ok."""


def _run(cmd: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _first_line(proc: subprocess.CompletedProcess) -> str:
    return ((proc.stdout or proc.stderr).strip().splitlines() or ["no output"])[0]


GPU_FIXES = {
    "run": "reinstall or reload the NVIDIA driver (a reboot often helps)",
    "exit": "the NVIDIA driver is not working: reinstall it or reboot; until then only CPU "
            "builds run",
    "output": "check that the GPU is visible to this machine or container",
}
"""What to do about each way ``nvidia-smi`` fails (``GpuQueryError.reason``)."""


def check_gpu() -> Check:
    """NVIDIA GPU and driver through :func:`backend.machine.gpus`: absent is a warning (CPU
    only), failing is a failure (a broken driver makes CUDA builds crash at start)."""
    try:
        found = machine.gpus(fresh=True)
    except machine.GpuQueryError as exc:
        return Check("gpu", "fail", str(exc), GPU_FIXES[exc.reason])
    if found is None:
        return Check("gpu", "warn", "no nvidia-smi on PATH: no NVIDIA GPU, CPU inference only",
                     "fine for small models; for 27-31B models use a machine with a 24 GB GPU "
                     "and its NVIDIA driver")
    return Check("gpu", "ok", "; ".join(f"{g.name} (driver {g.driver}, {g.free_mib} of "
                                        f"{g.total_mib} MiB free)" for g in found))


def check_cuda(has_gpu: bool) -> Check:
    """The CUDA compiler ``nvcc``, needed only for CUDA builds."""
    exe = shutil.which("nvcc")
    if exe is None:
        if has_gpu:
            return Check("cuda", "warn", "no nvcc on PATH: the engine builds for CPU only",
                         "install the CUDA toolkit (and put its bin/ on PATH), then "
                         "`agent backend build --cuda`")
        return Check("cuda", "ok", "no nvcc (not needed without a GPU)")
    try:
        proc = _run([exe, "--version"])
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("cuda", "fail", f"nvcc could not run: {exc}", "reinstall the CUDA toolkit")
    match = re.search(r"release ([\d.]+)", proc.stdout)
    if proc.returncode != 0 or not match:
        return Check("cuda", "fail", f"nvcc --version failed: {_first_line(proc)}",
                     "reinstall the CUDA toolkit")
    if not has_gpu:
        # An "ok" nvcc alone read as "CUDA works here" on a machine with no GPU.
        return Check("cuda", "ok", f"nvcc {match.group(1)} ({exe}); no GPU here, so builds "
                     "default to CPU (`agent backend build --cuda` makes a CUDA build anyway)")
    return Check("cuda", "ok", f"nvcc {match.group(1)} ({exe})")


def _tool(name: str, candidates: tuple[str, ...], engine: Engine | None, fix: str) -> Check:
    """A build tool: missing fails when no engine is installed yet (nothing can be built),
    warns otherwise (only a rebuild needs it)."""
    for candidate in candidates:
        exe = shutil.which(candidate)
        if exe is None:
            continue
        try:
            proc = _run([exe, "--version"])
        except (OSError, subprocess.SubprocessError) as exc:
            return Check(name, "fail", f"{candidate} could not run: {exc}", fix)
        if proc.returncode != 0:
            return Check(name, "fail", f"{candidate} --version failed: {_first_line(proc)}", fix)
        return Check(name, "ok", f"{_first_line(proc)} ({exe})")
    status: Status = "warn" if engine else "fail"
    why = "an engine is installed, so only a rebuild needs it" if engine else \
        "no engine is installed, so none can be built"
    return Check(name, status, f"none of {', '.join(candidates)} on PATH ({why})", fix)


def check_disk(min_free_mib: float | None = None) -> Check:
    """Free space where engines and models are stored (the home's cache directory)."""
    if min_free_mib is None:
        raw = os.environ.get(MIN_FREE_DISK_ENV)
        try:
            min_free_mib = float(raw) if raw else MIN_FREE_DISK_MIB
        except ValueError:
            return Check("disk", "fail", f"{MIN_FREE_DISK_ENV}={raw!r} is not a number of MiB",
                         f"set {MIN_FREE_DISK_ENV} to a number or unset it")
    where = home().cache
    probe = next(p for p in (where, *where.parents) if p.exists())
    usage = shutil.disk_usage(probe)
    free = usage.free / MIB
    detail = f"{free:.0f} MiB free of {usage.total / MIB:.0f} MiB at {probe} (cache: {where})"
    if free < min_free_mib:
        return Check("disk", "fail", f"{detail}; below the {min_free_mib:.0f} MiB minimum",
                     "free some space (`agent backend cache list`, then `agent backend cache "
                     "rm NAME`) or move the home with DFLASH_AGENT_HOME")
    if free < WARN_FREE_DISK_MIB:
        return Check("disk", "warn", f"{detail}; a 31B model with its draft needs about "
                     f"{WARN_FREE_DISK_MIB // 1024} GiB", "free space before downloading big "
                     "models (`agent backend cache rm NAME`)")
    return Check("disk", "ok", detail)


def check_ram() -> Check:
    """Total and available RAM."""
    mem = machine.memory()
    detail = f"{mem.available / MIB:.0f} MiB available of {mem.total / MIB:.0f} MiB"
    if mem.available / MIB < WARN_RAM_MIB:
        return Check("ram", "warn", detail, "close other programs; even small models need "
                     "about 1 GiB with their context")
    return Check("ram", "ok", detail)


def check_engine(engine: Engine | None) -> Check:
    """The installed engine and its flavour (from ``--help``); engines skipped because this
    CPU cannot run them are named."""
    if engine is None:
        skipped = unusable_engines()
        if skipped:
            return Check("engine", "warn", "no engine for this CPU: " + "; ".join(
                why for _, why in skipped), "`agent backend build` builds one for this CPU "
                "(`agent backend up` does it on first use)")
        return Check("engine", "warn", "no engine installed",
                     "`agent backend build` (or `agent backend up`, which builds on first use)")
    try:
        flavour = detect_flavour(engine.binary)
    except (OSError, subprocess.SubprocessError) as exc:
        return Check("engine", "fail", f"{engine.binary} does not run: {exc}",
                     f"rebuild: `agent backend cache rm {engine.key}` then `agent backend build`")
    kind = "CUDA" if "-DGGML_CUDA=ON" in engine.configure_flags else "CPU"
    return Check("engine", "ok", f"{engine.key}: {engine.engine} {engine.version} ({kind}, "
                 f"{flavour}) at {engine.binary}")


def _probe_model() -> tuple[Path, str]:
    """The model the engine check runs: the small preset when cached (it loads in a second,
    where the default coder model takes several), else the tiny probe model (written once into
    the model cache)."""
    try:
        cached = cached_file(get_preset(SMALL_PRESET).model).path
    except PresetError:
        cached = None
    if cached is not None:
        return cached, cached.name
    probe = home().ensure().models / "engine-probe.gguf"
    if not probe.is_file():
        # deferred: it needs gguf and numpy, ~0.25 s of every command's startup
        from backend.engine.probe_model import write_probe_model

        write_probe_model(probe)
    return probe, "the tiny probe model (no model cached yet)"


def check_engine_runs(engine: Engine | None, timeout: float = 180.0) -> Check:
    """Start the engine on a small model and generate one token (``POST /completion``).

    A crash is a failure naming its cause (the signal, e.g. SIGSEGV on an AMX CPU) and the fix,
    with the log's last meaningful lines; the server is always stopped afterwards.
    """
    if engine is None:
        return Check("engine run", "warn", "no engine to run", "build one: `agent backend build`")
    model, label = _probe_model()
    port = pick_port(DEFAULT_HOST, 0)
    plan = LaunchPlan(binary=engine.binary, model=model, profile="baseline", ctx_size=512)
    try:
        argv = launch_argv(plan, DEFAULT_HOST, port)
    except ServerError as exc:
        return Check("engine run", "fail", str(exc), "rebuild the engine (`agent backend build`)")
    log = home().ensure().state / "doctor-engine.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                env=server_env())
    try:
        error = _one_token(proc, f"http://{DEFAULT_HOST}:{port}", timeout)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if error is None:
        return Check("engine run", "ok", f"generated a token with {label}")
    text = log.read_text("utf-8", errors="replace")
    if error == "exited":
        why, fix = exit_cause(proc.returncode, text)
    else:
        why, fix = error, "read the log; `agent backend build` rebuilds the engine"
    lines = " | ".join(meaningful_lines(text, 4))
    return Check("engine run", "fail", f"{why} (with {label}); last log lines: {lines} "
                 f"(full log: {log})", fix)


def _one_token(proc: subprocess.Popen, base_url: str, timeout: float) -> str | None:
    """None when the server at ``base_url`` answered a one-token completion; ``"exited"`` when
    the process ended first; otherwise what went wrong."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return "exited"
        try:
            if httpx2.get(base_url + "/health", timeout=2.0).status_code == 200:
                break
        except httpx2.HTTPError:
            pass
        time.sleep(0.2)
    else:
        return f"llama-server did not become healthy within {timeout:.0f} s"
    try:
        resp = httpx2.post(base_url + "/completion", timeout=timeout,
                           json={"prompt": "Hello", "n_predict": 1, "cache_prompt": False})
    except httpx2.HTTPError as exc:
        if proc.poll() is not None or _wait_exit(proc):
            return "exited"
        return f"the one-token request failed: {exc}"
    if resp.status_code != 200 or "content" not in resp.text:
        return f"the one-token request answered {resp.status_code}: {resp.text[:200]}"
    return None


def _wait_exit(proc: subprocess.Popen, seconds: float = 5.0) -> bool:
    try:
        proc.wait(seconds)
    except subprocess.TimeoutExpired:
        return False
    return True


def check_models() -> Check:
    """Models in the cache."""
    models = [e for e in list_cache() if e.kind == "model"]
    if not models:
        return Check("models", "warn", f"no model cached in {home().models}",
                     "`agent backend download [PRESET]` (or `agent backend up`, which "
                     "downloads on first use)")
    total = sum(m.size_bytes for m in models) / MIB
    names = ", ".join(m.name for m in models[:4]) + (", …" if len(models) > 4 else "")
    return Check("models", "ok", f"{len(models)} cached, {total:.0f} MiB: {names}")


def check_servers() -> Check:
    """Managed servers that are running: each must answer ``/health`` with 200."""
    states = running()
    if not states:
        return Check("server", "ok", "no managed server running")

    def status_of(url: str) -> int:
        try:
            return httpx2.get(url + "/health", timeout=5.0).status_code
        except httpx2.HTTPError:
            return 0

    bad = []
    for state in states:
        code = status_of(state.base_url)
        if code != 200:
            answer = "no answer" if code == 0 else f"HTTP {code}"
            bad.append(f"pid {state.pid} at {state.base_url} ({answer})")
    if bad:
        return Check("server", "fail", "unhealthy: " + "; ".join(bad),
                     "read its log (`agent backend status`), then `agent backend down --all` "
                     "and `agent backend up`")
    return Check("server", "ok", f"{len(states)} running and healthy: "
                 + ", ".join(s.base_url for s in states))


def run_checks(min_free_mib: float | None = None,
               extra: Sequence[Callable[[], Check]] = ()) -> list[Check]:
    """Every check, in a fixed order: gpu, cuda, cmake, compilers, disk, ram, engine, engine
    run (one token generated), models, server, then the ``extra`` ones (the CLI passes its
    config-file checks: this package cannot load the agent's settings)."""
    engine = default_engine()
    gpu = check_gpu()
    return [
        gpu,
        check_cuda(gpu.status == "ok"),
        _tool("cmake", ("cmake",), engine, "install cmake >= 3.14 (e.g. `apt install cmake` or "
              "`pip install cmake`)"),
        _tool("c compiler", ("cc", "gcc", "clang"), engine,
              "install a C compiler (e.g. `apt install build-essential`)"),
        _tool("c++ compiler", ("c++", "g++", "clang++"), engine,
              "install a C++17 compiler (e.g. `apt install build-essential`)"),
        check_disk(min_free_mib),
        check_ram(),
        check_engine(engine),
        check_engine_runs(engine),
        check_models(),
        check_servers(),
        *(check() for check in extra),
    ]
