"""The CPU an engine is built for: its instruction-set features, the ggml CMake options that use
them, and whether an installed engine can run on this CPU.

Why builds are not ``GGML_NATIVE`` (``-march=native``):

* **AMX.** On Intel Xeons with AMX (Sapphire Rapids and later) a native b11434 build enables
  ggml's AMX buffer type, and its first matrix multiplication (the warm-up) dies with SIGSEGV
  in ``ggml_backend_amx_mul_mat`` (llama.cpp issue #20824; the proposed fix, PR #26954, asks
  the kernel for XTILEDATA permission per worker thread). Carrying that patch would tie us to
  one tree's layout (the sdist, a git tag, BeeLlama v0.3/v0.4 each differ), so the AMX options
  are simply off: the kernels are never compiled, on any x86 CPU. Weight repacking
  (``GGML_CPU_REPACK``, ``-nr`` off) stays on: it is the AVX2/AVX-512 path that makes quantised
  CPU inference fast, and it is not the crashing one.
* **Knowing what the binary needs.** With explicit ``GGML_AVX2=ON``-style options (the same ones
  ggml's own ``GGML_CPU_ALL_VARIANTS`` builds use) the set of instructions the engine needs is
  exactly the options turned on. It is recorded in the engine's manifest and key, so a home
  that moves to another CPU (a copied home, a network home, a container image) never runs a
  binary that would die there with SIGILL: the engine is rebuilt for the new CPU instead.

Other architectures (ARM, ...) keep ``GGML_NATIVE``; the engine then needs every feature the
build machine listed (``-mcpu=native`` may use any of them).
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

from backend.machine import cpu_features

_AVX512 = ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw")
X86_OPTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("GGML_SSE42", ("sse4_2",)),
    ("GGML_AVX", ("avx",)),
    ("GGML_F16C", ("f16c",)),
    ("GGML_FMA", ("fma",)),
    ("GGML_BMI2", ("bmi2",)),
    ("GGML_AVX2", ("avx2",)),
    ("GGML_AVX_VNNI", ("avx_vnni",)),
    ("GGML_AVX512", _AVX512),
    ("GGML_AVX512_VBMI", (*_AVX512, "avx512vbmi")),
    ("GGML_AVX512_VNNI", (*_AVX512, "avx512_vnni")),
    ("GGML_AVX512_BF16", (*_AVX512, "avx512_bf16")),
)
"""Each ggml x86 option (``ggml/CMakeLists.txt``, b11434) and the ``/proc/cpuinfo`` flags it
compiles in (``-mavx512f -mavx512cd ...`` for ``GGML_AVX512``: ``ggml-cpu/CMakeLists.txt``)."""
AMX_OPTIONS = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
"""Always off: see the module docstring."""
X86_MACHINES = {"x86_64", "amd64", "i386", "i686"}


@dataclass(frozen=True)
class CpuTarget:
    """What a build is compiled for."""

    cmake_flags: list[str]
    """``-D`` options for ggml's CPU backend."""
    requires: list[str]
    """CPU features (``/proc/cpuinfo`` names, sorted) the built binary executes."""
    tag: str
    """Short readable name for the engine key: ``avx512``, ``avx2``, ``sse42``, ``x86-64``, or
    the machine name (``aarch64-native``)."""


def build_target(features: frozenset[str], machine: str | None = None) -> CpuTarget:
    """The CPU target for a build on a CPU with ``features`` (``machine``: ``platform.machine()``).

    x86: every option of :data:`X86_OPTIONS` whose flags the CPU has is on, the others and AMX
    are off, ``GGML_NATIVE`` is off (without a feature list, e.g. on macOS: native, AMX off).
    Elsewhere: ``GGML_NATIVE=ON`` requiring all ``features``.
    """
    arch = (machine or platform.machine()).lower()
    if arch not in X86_MACHINES:
        return CpuTarget(["-DGGML_NATIVE=ON"], sorted(features), f"{arch or 'cpu'}-native")
    if not features:
        # No /proc/cpuinfo (macOS): nothing to choose from, and no AMX machine runs macOS.
        return CpuTarget(["-DGGML_NATIVE=ON", *(f"-D{o}=OFF" for o in AMX_OPTIONS)], [],
                         "x86-native")
    flags = ["-DGGML_NATIVE=OFF"]
    requires: set[str] = set()
    enabled = []
    for option, needs in X86_OPTIONS:
        on = set(needs) <= features
        flags.append(f"-D{option}={'ON' if on else 'OFF'}")
        if on:
            requires |= set(needs)
            enabled.append(option)
    flags += [f"-D{option}=OFF" for option in AMX_OPTIONS]
    tag = next((name for option, name in (("GGML_AVX512", "avx512"), ("GGML_AVX2", "avx2"),
                                           ("GGML_SSE42", "sse42")) if option in enabled),
               "x86-64")
    return CpuTarget(flags, sorted(requires), tag)


def missing_features(requires: list[str], features: frozenset[str] | None = None) -> list[str]:
    """The features of ``requires`` this CPU (``features``, default :func:`cpu_features`)
    lacks; empty when the binary can run here."""
    have = cpu_features() if features is None else features
    return [name for name in requires if name not in have]
