"""This machine's facts, asked in one place: its NVIDIA GPUs (the only caller of ``nvidia-smi``),
its CPU (model name and instruction-set features from ``/proc/cpuinfo``) and its memory.

What does not change while the process runs is asked once and kept: the GPUs' names, driver,
total memory and compute capability (per ``nvidia-smi`` found on ``PATH``), and the CPU's
features (per cpuinfo file). Free memory changes as servers start and stop, so a caller that
needs it asks afresh (``gpus(fresh=True)``, :func:`memory`).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil

NVIDIA_SMI = "nvidia-smi"
GPU_FIELDS = "name,driver_version,memory.total,memory.free,compute_cap"
"""One ``--query-gpu`` for every GPU fact the product uses (``compute_cap`` needs driver 510 or
later; an older driver is asked again without it)."""
CPUINFO = Path("/proc/cpuinfo")
"""Where Linux lists the CPU's model and features (the ``flags`` line on x86, ``Features`` on
ARM)."""


class GpuQueryError(RuntimeError):
    """``nvidia-smi`` exists but could not run, failed, or printed something unreadable."""

    def __init__(self, message: str, reason: Literal["run", "exit", "output"]):
        super().__init__(message)
        self.reason = reason
        """``run``: it could not start or timed out; ``exit``: it exited non-zero (a broken
        driver); ``output``: it listed no GPU or a line that is not one."""


@dataclass(frozen=True)
class Gpu:
    """One NVIDIA GPU as ``nvidia-smi`` reports it (memory in MiB)."""

    name: str
    driver: str
    total_mib: int
    free_mib: int
    compute_cap: str
    """``"8.9"``; empty where the driver cannot say."""

    @property
    def label(self) -> str:
        """Name and total memory, ``"NVIDIA H200, 143771 MiB"``: the device identity the
        speculation store keys its records by."""
        return f"{self.name}, {self.total_mib} MiB"


_asked: dict[str, tuple[Gpu, ...]] = {}
_features: dict[Path, frozenset[str]] = {}


def nvidia_smi() -> str | None:
    """The ``nvidia-smi`` on ``PATH``; None on a machine without an NVIDIA driver."""
    return shutil.which(NVIDIA_SMI)


def _run_smi(exe: str, fields: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=30,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as exc:
        raise GpuQueryError(f"nvidia-smi could not run: {exc}", "run") from exc


def _ask(exe: str) -> tuple[Gpu, ...]:
    proc = _run_smi(exe, GPU_FIELDS)
    with_cap = True
    if proc.returncode != 0 and "compute_cap" in (proc.stderr + proc.stdout):
        proc = _run_smi(exe, GPU_FIELDS.removesuffix(",compute_cap"))
        with_cap = False
    if proc.returncode != 0:
        last = ((proc.stderr or proc.stdout).strip().splitlines() or ["no output"])[-1]
        raise GpuQueryError(f"nvidia-smi failed (exit {proc.returncode}): {last}", "exit")
    found = []
    for line in proc.stdout.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        try:
            name, driver, total, free = parts[:4]
            found.append(Gpu(name, driver, int(float(total)), int(float(free)),
                             parts[4] if with_cap and len(parts) > 4 else ""))
        except ValueError as exc:
            raise GpuQueryError(f"nvidia-smi printed an unreadable line: {line!r}",
                                "output") from exc
    if not found:
        raise GpuQueryError("nvidia-smi listed no GPU", "output")
    return tuple(found)


def gpus(fresh: bool = False) -> tuple[Gpu, ...] | None:
    """The NVIDIA GPUs; None without ``nvidia-smi``. Asked once per ``nvidia-smi`` and kept;
    ``fresh`` asks again (for free memory, which changes as servers start and stop).

    Raises :class:`GpuQueryError` when ``nvidia-smi`` fails, times out or prints no readable
    line (a failure is not kept: the next call asks again).
    """
    exe = nvidia_smi()
    if exe is None:
        return None
    if fresh or exe not in _asked:
        _asked[exe] = _ask(exe)
    return _asked[exe]


def gpu_names() -> list[str]:
    """Name and memory per GPU (:attr:`Gpu.label`); empty without a working NVIDIA GPU."""
    try:
        return [gpu.label for gpu in gpus() or ()]
    except GpuQueryError:
        return []


def cpu_features(cpuinfo: Path | None = None) -> frozenset[str]:
    """The CPU's feature flags (lower case) from ``cpuinfo`` (default :data:`CPUINFO`), read once
    per file; empty when the file is missing or unreadable (not Linux)."""
    path = cpuinfo or CPUINFO
    if path not in _features:
        _features[path] = _read_features(path)
    return _features[path]


def _read_features(path: Path) -> frozenset[str]:
    try:
        text = path.read_text("utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in {"flags", "features"}:
            return frozenset(value.lower().split())
    return frozenset()


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` says."""
    try:
        for line in CPUINFO.read_text("utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_threads() -> int | None:
    """Logical CPUs, as :func:`os.cpu_count` says."""
    return os.cpu_count()


@dataclass(frozen=True)
class Memory:
    """RAM now, in bytes."""

    available: int
    total: int


def memory() -> Memory:
    """Available and total RAM, asked afresh (psutil)."""
    mem = psutil.virtual_memory()
    return Memory(available=mem.available, total=mem.total)
