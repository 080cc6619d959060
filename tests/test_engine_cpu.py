"""Engines are built for the CPU they run on: explicit instruction sets, never AMX (the
SIGSEGV at warm-up on Sapphire Rapids), and an installed engine whose features this CPU lacks
is not run (it would die with SIGILL) but rebuilt."""

from __future__ import annotations

import json
import subprocess
import time
import zlib
from pathlib import Path

import httpx2
import pytest

from backend import machine
from backend.engine.build import default_engine
from backend.engine.cmake import configure_flags
from backend.engine.cpu import build_target, missing_features
from backend.engine.registry import BuildError, Engine, cpu_mismatch, unusable_engines
from backend.machine import cpu_features
from backend.serve.launch import ensure_engine

SAPPHIRE_RAPIDS = ("fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma bmi2 avx2 avx512f avx512dq "
                   "avx512cd avx512bw avx512vl avx512vbmi avx512_vnni avx512_bf16 avx_vnni "
                   "amx_bf16 amx_tile amx_int8")
HASWELL = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma bmi2 avx2"


def _cpuinfo(tmp_path: Path, flags: str) -> Path:
    """A cpuinfo file listing ``flags``: one file per set, since each file is read once."""
    path = tmp_path / f"cpuinfo-{zlib.crc32(flags.encode()):08x}"
    path.write_text(f"processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: {flags}\n\n"
                    f"processor\t: 1\nflags\t\t: {flags}\n")
    return path


def test_an_amx_cpu_gets_avx512_and_never_the_amx_kernels(tmp_path: Path):
    target = build_target(cpu_features(_cpuinfo(tmp_path, SAPPHIRE_RAPIDS)), "x86_64")
    flags = target.cmake_flags
    assert "-DGGML_NATIVE=OFF" in flags  # -march=native would switch AMX back on
    for option in ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16"):
        assert f"-D{option}=OFF" in flags and f"-D{option}=ON" not in flags
    for option in ("GGML_AVX2", "GGML_AVX512", "GGML_AVX512_VNNI", "GGML_AVX512_BF16",
                   "GGML_AVX_VNNI", "GGML_FMA", "GGML_F16C"):
        assert f"-D{option}=ON" in flags
    assert target.tag == "avx512"
    assert "avx512f" in target.requires and not any("amx" in f for f in target.requires)
    # Repacking is ggml's default and stays on: no -DGGML_CPU_REPACK=OFF.
    assert not any("REPACK" in f for f in flags)


def test_a_cpu_without_avx512_gets_avx2_only(tmp_path: Path):
    target = build_target(cpu_features(_cpuinfo(tmp_path, HASWELL)), "x86_64")
    assert "-DGGML_AVX2=ON" in target.cmake_flags and "-DGGML_AVX512=OFF" in target.cmake_flags
    assert "-DGGML_AVX512_VNNI=OFF" in target.cmake_flags
    assert target.tag == "avx2" and "avx512f" not in target.requires


def test_other_architectures_stay_native_and_need_every_listed_feature(tmp_path: Path):
    path = tmp_path / "cpuinfo"
    path.write_text("processor\t: 0\nFeatures\t: fp asimd evtstrm aes crc32 atomics sve\n")
    target = build_target(cpu_features(path), "aarch64")
    assert target.cmake_flags == ["-DGGML_NATIVE=ON"]
    assert target.requires == sorted(["fp", "asimd", "evtstrm", "aes", "crc32", "atomics", "sve"])
    assert missing_features(target.requires, frozenset({"fp", "asimd"})) == [
        "aes", "atomics", "crc32", "evtstrm", "sve"]


def test_the_cpu_target_is_part_of_the_configure_flags_and_the_key(tmp_path: Path):
    from backend.engine.registry import engine_key

    amx = build_target(cpu_features(_cpuinfo(tmp_path, SAPPHIRE_RAPIDS)), "x86_64")
    old = build_target(cpu_features(_cpuinfo(tmp_path, HASWELL)), "x86_64")
    a, b = configure_flags(None, cpu=amx), configure_flags(None, cpu=old)
    assert a != b and "-DGGML_AVX512=ON" in a
    key_a, key_b = engine_key("llama.cpp", "11434", a, amx.tag), \
        engine_key("llama.cpp", "11434", b, old.tag)
    assert key_a.startswith("llama.cpp-11434-cpu-avx512-")
    assert key_b.startswith("llama.cpp-11434-cpu-avx2-") and key_a != key_b


def _install_manifest(home: Path, key: str, features: list[str] | None, binary: Path) -> None:
    folder = home / "cache" / "engines" / key
    folder.mkdir(parents=True)
    data = {"engine": "llama.cpp", "version": "11434", "key": key, "binary": str(binary),
            "configure_flags": [], "installed_at": time.time()}
    if features is not None:
        data["cpu_features"] = features
    (folder / "engine.json").write_text(json.dumps(data))


def test_an_engine_built_for_a_richer_cpu_is_not_run_here_but_rebuilt(
        agent_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A home copied from an AVX-512 machine to an AVX2 one: the engine would die with SIGILL;
    it is skipped with the reason, and a build for this CPU starts (here it fails at once on a
    broken sdist, which proves the rebuild was attempted without a 6-minute build)."""
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    _install_manifest(agent_home, "llama.cpp-11434-cpu-avx512-abc", ["avx2", "avx512f"], binary)
    monkeypatch.setattr(machine, "CPUINFO", _cpuinfo(tmp_path, HASWELL))
    assert default_engine() is None
    [(engine, why)] = unusable_engines()
    assert "avx512f" in why and "SIGILL" in why
    notes: list[str] = []
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(b"not an sdist")
    with pytest.raises(BuildError, match="unpack"):
        ensure_engine(sdist=broken, note=notes.append)
    assert notes and "building one for this CPU" in notes[0] and "avx512f" in notes[0]
    # On the AVX-512 machine it is used as before.
    monkeypatch.setattr(machine, "CPUINFO", _cpuinfo(tmp_path, SAPPHIRE_RAPIDS))
    assert default_engine() == engine


def test_an_engine_from_before_cpu_keys_is_not_trusted(agent_home: Path, tmp_path: Path):
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    _install_manifest(agent_home, "llama.cpp-11434-cpu-0123456789", None, binary)
    assert default_engine() is None
    [(_, why)] = unusable_engines()
    assert "-march=native" in why and "AMX" in why


def test_the_doctor_names_an_engine_this_cpu_cannot_run(agent_home: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch):
    from backend.doctor import check_engine

    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    _install_manifest(agent_home, "llama.cpp-11434-cpu-avx512-abc", ["avx512f"], binary)
    monkeypatch.setattr(machine, "CPUINFO", _cpuinfo(tmp_path, HASWELL))
    check = check_engine(default_engine())
    assert check.status == "warn" and "avx512f" in check.detail
    assert "agent backend build" in check.fix


def test_the_built_engine_runs_here_without_amx_and_with_repacking(engine: Engine,
                                                                   real_server):
    """The real build on this machine (an AMX Xeon in this project's CI): no AMX kernels in
    the binary, weight repacking on (no -nr), and it answers a completion."""
    assert engine.cpu_features is not None and cpu_mismatch(engine) is None
    assert "-DGGML_AMX_INT8=OFF" in engine.configure_flags
    state = real_server("baseline")
    assert "-nr" not in state.argv and "--no-repack" not in state.argv
    symbols = subprocess.run(["nm", "-C", str(engine.binary)], capture_output=True, text=True,
                             check=True).stdout
    # A -march=native build on this CPU has ggml_backend_amx_mul_mat (where it crashed).
    assert "ggml_backend_amx_mul_mat" not in symbols
    assert "ggml_backend_cpu_repack_buffer_type" in symbols
    resp = httpx2.post(state.base_url + "/completion", timeout=120,
                       json={"prompt": "def add(a, b):", "n_predict": 4})
    assert resp.status_code == 200 and resp.json()["tokens_predicted"] >= 1
