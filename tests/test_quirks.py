"""Build-specific workarounds (backend.serve.quirks) and the CUDA build's flags, without a GPU: the
rules alone, and a CUDA build of a toy tree through the CLI with stand-in nvcc/nvidia-smi (the
real bee-old binary: tests/test_beellama_real.py)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from backend.engine.cmake import configure_flags, needs_fa_all_quants
from backend.models.presets import ServerOptions
from backend.serve.profiles import LaunchPlan
from backend.serve.quirks import NEUTRAL_LOGIT_BIAS, kv_kernel_note, launch_flags, request_extra
from tests.fake_tools import fake_nvidia_smi, gpu_line

AGENT = [sys.executable, "-m", "agent"]


def _plan(profile: str = "dflash", extra: tuple[str, ...] = (), **options: object) -> LaunchPlan:
    return LaunchPlan(binary=Path("/x/bin/llama-server"), model=Path("/m.gguf"), profile=profile,
                      ctx_size=1024, draft=Path("/d.gguf") if profile == "dflash" else None,
                      options=ServerOptions(**options), extra_flags=extra)


def test_the_reduced_verify_workaround_is_for_bee_old_dflash_on_other_graphs_only():
    extra, why = request_extra("bee-old", "dflash", "llama")
    assert extra == NEUTRAL_LOGIT_BIAS == {"logit_bias": {"0": 0}}
    assert why and "'llama' target" in why and "GGML_ASSERT" in why
    for args in (("bee-old", "dflash", "gemma4"), ("bee-old", "dflash", "qwen35"),
                 ("bee-old", "ngram", "llama"), ("upstream", "dflash", "llama"),
                 ("bee-new", "dflash", "llama")):
        assert request_extra(*args) == ({}, None), args


def test_the_draft_device_flag_is_added_only_where_v031_needs_it():
    flags, why = launch_flags(_plan(), "bee-old", [])
    assert flags == ["--spec-draft-device", "none"] and why and "no GPU device" in why
    assert launch_flags(_plan(), "bee-old", ["CUDA0: NVIDIA H200 (143771 MiB)"]) == ([], None)
    assert launch_flags(_plan(), "upstream", []) == ([], None)
    assert launch_flags(_plan("baseline"), "bee-old", []) == ([], None)
    assert launch_flags(_plan(extra=("-devd", "CUDA1")), "bee-old", []) == ([], None)


def test_fa_all_quants_is_needed_for_the_seeds_kv_types_only():
    assert needs_fa_all_quants("q5_0", "q4_1")  # the seed's
    assert needs_fa_all_quants("q8_0", "f16") and needs_fa_all_quants("q4_1", "q4_1")
    for same in (None, "f16", "q8_0", "q4_0", "bf16", "turbo4", "turbo3_tcq"):
        assert not needs_fa_all_quants(same, same), same
    on, off = configure_flags("90"), configure_flags("90", fa_all_quants=False)
    assert "-DGGML_CUDA_FA_ALL_QUANTS=ON" in on and "-DGGML_CUDA_FA_ALL_QUANTS=OFF" in off
    assert configure_flags(None) == configure_flags(None, fa_all_quants=False)  # CPU: no effect
    seed = _plan(cache_type_k="q5_0", cache_type_v="q4_1")
    note = kv_kernel_note(seed, off)
    assert note and "--fa-all-quants" in note and "q5_0/q4_1" in note
    assert kv_kernel_note(seed, on) is None and kv_kernel_note(_plan(), off) is None
    assert kv_kernel_note(seed, configure_flags(None)) is None


def test_a_cuda_build_runs_through_the_cli(tmp_path: Path, agent_home: Path):
    """With stand-in nvcc/nvidia-smi (compute capability 9.0): the flags and key a CUDA build of
    BeeLlama gets from `agent backend build --engine beellama --source ARCHIVE --cuda`."""
    tree = {"CMakeLists.txt": "cmake_minimum_required(VERSION 3.14)\nproject(t C)\n"
                              "add_executable(llama-server main.c)\nset_target_properties("
                              "llama-server PROPERTIES RUNTIME_OUTPUT_DIRECTORY "
                              "${CMAKE_BINARY_DIR}/bin)\n",
            "ggml/README": "ggml\n", "CHANGELOG.md": "## v0.3.1\n",
            "main.c": '#include <stdio.h>\nint main(void){puts("version: 1 (t)");return 0;}\n'}
    archive = tmp_path / "beellama.cpp-v0.3.1.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in tree.items():
            info = tarfile.TarInfo(f"beellama.cpp-v0.3.1/{name}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    fake = tmp_path / "fakebin"
    fake.mkdir()
    fake_nvidia_smi(fake, gpu_line(name="NVIDIA H100", cap="9.0"))
    (fake / "nvcc").write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0'\n")
    for tool in fake.iterdir():
        tool.chmod(0o755)
    env = {**os.environ, "DFLASH_AGENT_HOME": str(agent_home), "NO_COLOR": "1",
           "PATH": f"{fake}:{os.environ['PATH']}"}
    for extra, all_quants in (((), "ON"), (("--no-fa-all-quants",), "OFF")):
        proc = subprocess.run([*AGENT, "backend", "build", "--engine", "beellama", "--source",
                               str(archive), "--cuda", "--jobs", "2", *extra],
                              capture_output=True, text=True, timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr
        assert "engine beellama-v0.3.1-bee-old-cuda-" in proc.stdout
        key = proc.stdout.split()[1].rstrip(":")
        flags = (agent_home / "cache" / "engines" / key / "engine.json").read_text()
        for flag in ("-DGGML_CUDA=ON", "-DGGML_CUDA_FA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90",
                     f"-DGGML_CUDA_FA_ALL_QUANTS={all_quants}", "-DLLAMA_BUILD_UI=OFF",
                     "-DLLAMA_USE_PREBUILT_UI=OFF", "-DGGML_AMX_INT8=OFF"):
            assert flag in flags, (flag, flags)
    without = {**env, "PATH": os.environ["PATH"]}
    if not any((Path(d) / "nvcc").exists() for d in os.environ["PATH"].split(os.pathsep)):
        proc = subprocess.run([*AGENT, "backend", "build", "--engine", "beellama", "--source",
                               str(archive), "--cuda"], capture_output=True, text=True,
                              timeout=300, env=without)
        assert proc.returncode == 3 and "CUDA was requested but nvcc is missing" in proc.stderr
