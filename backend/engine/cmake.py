"""How a tree is configured for this machine: the CMake flags (CPU instruction sets, CUDA and its
architectures, flash-attention kernels, RPC), the build tools every build needs, and CMake's own
first error when configuring fails."""

from __future__ import annotations

import shutil
from pathlib import Path

from backend import machine
from backend.engine.cpu import CpuTarget, build_target
from backend.engine.registry import BuildError
from backend.engine.sources import LLAMA_CPP_VERSION


def detect_cuda_arch() -> str | None:
    """The GPUs' compute capabilities as a CMake arch (``"89"``), or None without nvcc and a GPU
    that says its capability (:func:`backend.machine.gpus`: ``8.9`` becomes ``89``)."""
    if not shutil.which("nvcc"):
        return None
    try:
        found = machine.gpus() or ()
    except machine.GpuQueryError:
        return None
    caps = sorted({gpu.compute_cap.replace(".", "") for gpu in found if gpu.compute_cap})
    return ";".join(caps) or None


FA_SAME_TYPE_KERNELS = frozenset({"f32", "f16", "q4_0", "q8_0", "bf16", "turbo2", "turbo3",
                                   "turbo4", "turbo2_tcq", "turbo3_tcq"})
"""K/V types whose CUDA flash-attention kernels exist without ``GGML_CUDA_FA_ALL_QUANTS``, when K
and V have the same type (``ggml/src/ggml-cuda/fattn.cu``, BeeLlama v0.3.1 and b11434)."""


def needs_fa_all_quants(type_k: str | None, type_v: str | None) -> bool:
    """Whether a CUDA build needs ``GGML_CUDA_FA_ALL_QUANTS`` for these KV types (None: f16) to
    keep flash attention on the GPU: mixed K/V types, or q4_1/q5_0/q5_1/q6_0 (the seed's
    q5_0/q4_1 ran at 232 tok/s instead of 615-690 without it: docs/design/beellama.md)."""
    k, v = type_k or "f16", type_v or "f16"
    return k != v or k not in FA_SAME_TYPE_KERNELS


def configure_flags(cuda_arch: str | None,
                    build_number: str | None = LLAMA_CPP_VERSION,
                    cpu: CpuTarget | None = None, fa_all_quants: bool = True,
                    rpc: bool = False) -> list[str]:
    """CMake ``-D`` flags for a ``llama-server``-only build (CPU, or CUDA for ``cuda_arch``).

    The UI options stop b11434 from downloading web assets during the build
    (docs/design/backend-facts.md, Flags); static libraries make the binary start without
    LD_LIBRARY_PATH. ``build_number`` names a tree without ``.git`` (the sdist) so
    ``/props.build_info`` says which build it is. The CUDA flags are the seed's
    (docs/design/seed.md: CUDA, flash attention with all quantized KV types). ``cpu`` (default: this
    CPU, :func:`backend.engine.cpu.build_target`) adds ggml's instruction-set options: explicit
    features, AMX off (why: :mod:`backend.engine.cpu`). ``fa_all_quants`` (CUDA only):
    flash-attention kernels for every K/V type pair, the seed's flag; off, the CUDA build is much
    shorter and only same-type f16/q4_0/q8_0/bf16/turbo caches keep flash attention on the GPU
    (:func:`needs_fa_all_quants`). ``rpc``: ggml's RPC backend (``GGML_RPC=ON``), so the server can
    use ``--rpc`` workers and the build makes ``rpc-server`` too.
    """
    cpu = cpu or build_target(machine.cpu_features())
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_UI=OFF",
             "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
             "-DLLAMA_OPENSSL=OFF", "-DCMAKE_BUILD_RPATH=$ORIGIN"]
    if build_number is not None:
        flags += [f"-DLLAMA_BUILD_NUMBER={build_number}", "-DLLAMA_BUILD_COMMIT=pypi-sdist"]
    flags += cpu.cmake_flags
    if cuda_arch:
        flags += ["-DGGML_CUDA=ON", "-DGGML_CUDA_FA=ON",
                  f"-DGGML_CUDA_FA_ALL_QUANTS={'ON' if fa_all_quants else 'OFF'}",
                  f"-DCMAKE_CUDA_ARCHITECTURES={cuda_arch}"]
    if rpc:
        flags.append("-DGGML_RPC=ON")
    return flags


BUILD_TOOLS = (("cmake", "cmake"), ("c++", "build-essential (a C++ compiler)"),
               ("cc", "build-essential (a C compiler)"))
"""Programs every build needs, with what to install (Debian/Ubuntu package names)."""


def check_build_tools() -> None:
    """Raise :class:`BuildError` (step ``configure``) naming the first missing build tool: cmake,
    the C and C++ compilers, and a build program (ninja or make)."""
    for tool, package in BUILD_TOOLS:
        if not shutil.which(tool):
            raise BuildError("configure", f"'{tool}' is not installed; install {package} "
                             "(e.g. apt-get install cmake build-essential ninja-build) and "
                             "retry")
    if not shutil.which("ninja") and not shutil.which("make"):
        raise BuildError("configure", "neither 'ninja' nor 'make' is installed; install one "
                         "(e.g. apt-get install ninja-build) and retry")


def configure_error(exc: BuildError, log: Path) -> BuildError:
    """A configure failure with CMake's own first error line (a missing dependency names
    itself there: ``Could NOT find CUDAToolkit``, a too old cmake…)."""
    lines = log.read_text("utf-8", errors="replace").splitlines()
    for i, line in enumerate(lines):
        if line.startswith("CMake Error"):
            detail = " ".join(part.strip() for part in lines[i + 1:i + 4] if part.strip())
            cause = f"{line.strip()} {detail}".strip()[:300]
            return BuildError("configure", f"cmake failed: {cause}", exc.log, exc.tail)
    return exc
