"""Fit check: GGUF header facts, the KV estimate against what a real llama-server allocates, and
refusals with numbers for a 31B Gemma 4 header on a (stand-in) 24 GB GPU."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from backend.models.ggufinfo import GgufError, read_gguf_info
from backend.models.presets import ServerOptions, get_preset
from backend.serve.fit import FitError, check_fit, estimate, fit_report, gather, gpu_memory
from backend.serve.profiles import LaunchPlan
from backend.serve.sizes import KvShape, kv_bytes, row_bytes
from tests.fake_tools import DRIVER_FAILURE, fake_nvidia_smi, gpu_line
from tests.synthetic_gguf import (
    GEMMA4_LAYERS,
    write_dflash_draft_header,
    write_gemma4_31b_header,
)

MIB = 2**20
GEMMA = get_preset("gemma4-31b-dflash")
# The preset with --swa-full instead of its checkpoints: what does not fit a 24 GB card.
SWA_FULL = GEMMA.server.model_copy(update={"swa_full": True, "ctx_checkpoints": None})


@pytest.fixture
def gpu_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``put(stdout, exit_code, stderr)`` puts a fake nvidia-smi first on PATH; ``none()``
    leaves a PATH without any nvidia-smi."""
    bin_dir = tmp_path / "fakebin"

    class Put:
        def __call__(self, stdout: str = gpu_line(), exit_code: int = 0,
                     stderr: str = "") -> None:
            fake_nvidia_smi(bin_dir, stdout, exit_code, stderr)
            monkeypatch.setenv("PATH", str(bin_dir))

        def none(self) -> None:
            bin_dir.mkdir(exist_ok=True)
            monkeypatch.setenv("PATH", str(bin_dir))

    return Put()


@pytest.fixture(scope="module")
def gemma_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("gemma4")
    return (write_gemma4_31b_header(folder / "gemma-4-31B-it-Q4_K_S.gguf"),
            write_dflash_draft_header(folder / "gemma4-31b-it-dflash.gguf"))


def _plan(model: Path, draft: Path | None = None, ctx: int = 32768,
          options: ServerOptions = SWA_FULL, parallel: int = 1) -> LaunchPlan:
    return LaunchPlan(binary=Path(sys.executable), model=model, draft=draft,
                      profile="dflash" if draft else "baseline", ctx_size=ctx, options=options,
                      parallel=parallel)


# --- GGUF header ---------------------------------------------------------------------------

def test_smollm2_header_facts(smollm2: Path):
    info = read_gguf_info(smollm2)
    assert (info.architecture, info.n_layer, info.n_embd, info.n_head) == ("llama", 30, 576, 9)
    assert set(info.n_head_kv) == {3} and (info.head_dim_k, info.head_dim_v) == (64, 64)
    assert info.n_swa == 0 and info.context_length == 8192 and info.n_vocab == 49152
    assert info.complete and info.file_size == smollm2.stat().st_size
    assert 0.9 * info.file_size < info.tensor_bytes <= info.file_size


def test_gemma4_header_per_layer_arrays(gemma_files: tuple[Path, Path]):
    info = read_gguf_info(gemma_files[0])
    assert info.architecture == "gemma4" and info.n_layer == GEMMA4_LAYERS
    assert info.n_swa == 1024 and sum(info.swa_layers) == 50
    assert info.kv_width(0) == (16 * 256, 16 * 256)  # sliding layer
    assert info.kv_width(5) == (4 * 512, 4 * 512)  # full-attention layer
    assert not info.complete and info.file_size < MIB
    assert 16 * 2**30 < info.tensor_bytes < 18 * 2**30  # a Q4_K 31B model


def test_truncated_data_is_described_not_rejected(smollm2: Path, tmp_path: Path):
    half = tmp_path / "half.gguf"
    with smollm2.open("rb") as src:
        half.write_bytes(src.read(smollm2.stat().st_size // 2))
    info = read_gguf_info(half)
    assert not info.complete and info.tensor_bytes == read_gguf_info(smollm2).tensor_bytes


@pytest.mark.parametrize("cut", [4, 8, 20, 100, 2000, 40000])
def test_truncated_header_is_a_clear_error(gemma_files: tuple[Path, Path], tmp_path: Path,
                                           cut: int):
    broken = tmp_path / "cut.gguf"
    broken.write_bytes(gemma_files[0].read_bytes()[:cut])
    with pytest.raises(GgufError, match="truncated or corrupt GGUF header|missing key"):
        read_gguf_info(broken)


@pytest.mark.parametrize("content,message", [(b"", "not a GGUF"), (b"PK\x03\x04zip", "not a GGUF"),
                                             (None, "no such file")])
def test_non_gguf_inputs(tmp_path: Path, content: bytes | None, message: str):
    path = tmp_path / "model.gguf"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(GgufError, match=message):
        read_gguf_info(path)


def test_header_without_layer_count(tmp_path: Path):
    import gguf

    path = tmp_path / "bare.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_embedding_length(64)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    with pytest.raises(GgufError, match="missing key llama.block_count"):
        read_gguf_info(path)


def test_row_bytes_use_ggml_block_sizes():
    assert row_bytes("f16", 4096) == 8192
    assert row_bytes("q8_0", 4096) == 4096 // 32 * 34
    assert row_bytes("q5_0", 4096) == 4096 // 32 * 22
    assert row_bytes("q4_1", 4096) == 4096 // 32 * 20
    with pytest.raises(ValueError, match="unknown KV cache type 'turbo4'"):
        row_bytes("turbo4", 4096)


# --- the estimate against the real server -----------------------------------------------------

def _logged_kv_mib(log: Path) -> float:
    """Sum of the ``llama_kv_cache: <dev> KV buffer size = X MiB`` lines of a server log."""
    text = log.read_text("utf-8", errors="replace")
    sizes = [float(m) for m in re.findall(r"llama_kv_cache:.*KV buffer size =\s*([\d.]+) MiB",
                                          text)]
    assert sizes, f"no KV buffer line in {log}"
    return sum(sizes)


@pytest.mark.parametrize("flags,options,parallel", [
    ((), ServerOptions(), 1),
    (("-ctk", "q8_0", "-ctv", "q4_0", "-np", "2"),
     ServerOptions(cache_type_k="q8_0", cache_type_v="q4_0"), 2),
])
def test_kv_estimate_within_10_percent_of_real_server(real_server, smollm2: Path, flags,
                                                      options: ServerOptions, parallel: int):
    # -lv 4 makes b11434 print its llama_kv_cache allocation lines.
    state = real_server("baseline", ("-lv", "4", *flags))
    logged = _logged_kv_mib(state.log)
    report = fit_report(_plan(smollm2, ctx=state.plan.ctx_size, options=options,
                              parallel=parallel))
    estimated = sum(c.mib for c in report.components if c.name.startswith("target KV"))
    assert abs(estimated - logged) <= 0.10 * logged, (estimated, logged)


# --- refusals with numbers ----------------------------------------------------------------------

def test_31b_gemma_on_a_24gb_gpu_is_refused_with_numbers(gemma_files, gpu_path):
    gpu_path()
    target, draft = gemma_files
    with pytest.raises(FitError) as caught:
        check_fit(_plan(target, draft))
    report, text = caught.value.report, str(caught.value)
    # Hand-computed from the header: 10 full layers x 4 KV heads x 512, 50 sliding layers x 16
    # x 256, K q5_0 (22 B per 32), V q4_1 (20 B per 32), 32768 cells each (--swa-full).
    full = 10 * 32768 * (2048 // 32 * 22 + 2048 // 32 * 20) / MIB
    swa = 50 * 32768 * (4096 // 32 * 22 + 4096 // 32 * 20) / MIB
    by_name = {c.name: c.mib for c in report.components}
    assert by_name["target KV cache (q5_0/q4_1)"] == pytest.approx(full)
    assert by_name["target sliding-window KV (full size, --swa-full)"] == pytest.approx(swa)
    assert by_name["draft KV cache (f16)"] == pytest.approx(5 * 32768 * 2 * 8 * 128 * 2 / MIB)
    for mib in (full, swa, by_name["target weights"], by_name["draft weights"]):
        assert f"{mib:.0f} MiB" in text
    need = report.need("gpu")
    assert f"GPU: needs {need:.0f} MiB, 23800 MiB free of 24564" in text
    assert f"short by {need - 23800:.0f} MiB" in text
    assert report.suggested_ctx and f"try --ctx-size {report.suggested_ctx}" in text
    assert "--force" in text
    inputs, _ = gather(target, draft, SWA_FULL)
    assert estimate(inputs, report.suggested_ctx).fits
    assert not estimate(inputs, report.suggested_ctx + 256).fits


def test_force_turns_the_refusal_into_a_note(gemma_files, gpu_path):
    gpu_path()
    notes: list[str] = []
    report = check_fit(_plan(*gemma_files), force=True, note=notes.append)
    assert report is not None and not report.fits
    assert notes and notes[0].startswith("--force: launching although")


def test_window_sized_swa_cache_fits_and_counts_checkpoints(gemma_files, gpu_path):
    gpu_path()
    assert not GEMMA.server.swa_full and GEMMA.server.ctx_checkpoints == 8
    report = check_fit(_plan(*gemma_files, options=GEMMA.server))  # the packaged preset
    assert report is not None and report.fits
    by_name = {c.name: c for c in report.components}
    cells = 1024 + 512  # window + ubatch, a multiple of 256 already
    assert by_name["target sliding-window KV (window 1024)"].mib == pytest.approx(
        50 * cells * (4096 // 32 * 22 + 4096 // 32 * 20) / MIB)
    ckpt = by_name["context checkpoints (upper bound)"]
    assert ckpt.where == "host"
    assert ckpt.mib == pytest.approx(8 * by_name["target sliding-window KV (window 1024)"].mib)


def test_without_gpu_everything_counts_against_ram(gemma_files, gpu_path):
    gpu_path.none()
    report = fit_report(_plan(*gemma_files))
    assert report.gpu is None and report.need("gpu") == 0
    assert report.need("host") == pytest.approx(sum(c.mib for c in report.components))
    assert report.fits == (report.need("host") <= report.ram_available_mib)
    assert any("gpu_layers = all but no GPU answered" in n for n in report.notes)


def test_failing_nvidia_smi_is_noted_and_ram_used(gemma_files, gpu_path):
    gpu_path(stdout="", exit_code=9, stderr=DRIVER_FAILURE)
    report = fit_report(_plan(*gemma_files))
    assert report.gpu is None and report.need("gpu") == 0
    assert any("nvidia-smi failed (exit 9)" in n and "communicate with the NVIDIA driver" in n
               for n in report.notes)


def test_unreadable_nvidia_smi_output(gpu_path):
    gpu_path(stdout="No devices were found")
    from backend.machine import GpuQueryError

    with pytest.raises(GpuQueryError, match="unreadable line"):
        gpu_memory()


def test_two_gpus_add_up_and_partial_offload_splits(gemma_files, gpu_path):
    gpu_path(stdout=f"{gpu_line()}\n{gpu_line(23000)}")
    gpu = gpu_memory()
    assert gpu is not None and (gpu.free_mib, gpu.total_mib, gpu.count) == (46800, 49128, 2)
    half = GEMMA.server.model_copy(update={"gpu_layers": "30"})
    report = fit_report(_plan(gemma_files[0], options=half))
    weights = {c.where: c.mib for c in report.components if c.name == "target weights"}
    assert weights["gpu"] == pytest.approx((weights["gpu"] + weights["host"]) * 30 / 61)


def test_smollm2_fits_on_cpu_with_its_real_sizes(smollm2: Path, gpu_path):
    gpu_path.none()
    report = check_fit(_plan(smollm2, ctx=8192, options=ServerOptions()))
    assert report is not None and report.fits
    kv = {c.name: c.mib for c in report.components}["target KV cache (f16/f16)"]
    assert kv == pytest.approx(8192 * 30 * 2 * 3 * 64 * 2 / MIB)


def test_too_many_slots_are_named_not_the_weights(smollm2: Path, gpu_path):
    """A field trial: `up --parallel 20000 --ctx-size 512` on SmolLM2 (92 MiB of weights)
    was told "the weights alone are too big"; the slots' KV caches were (~112 GiB)."""
    gpu_path.none()
    report = fit_report(_plan(smollm2, ctx=512, options=ServerOptions(), parallel=20000))
    assert not report.fits and report.suggested_ctx is None
    message = report.message()
    assert "no context size fits with --parallel 20000: each slot gets a KV cache" in message
    assert "weights alone" not in message


def test_kv_unified_and_slots_follow_llama_cpp_padding(smollm2: Path):
    info = read_gguf_info(smollm2)
    per_cell = 30 * 2 * 192 * 2
    assert kv_bytes(info, KvShape(ctx=1000))[0] == 1024 * per_cell
    # Three slots, separate streams: pad(1024 / 3, 256) = 512 cells each.
    assert kv_bytes(info, KvShape(ctx=1000, slots=3))[0] == 3 * 512 * per_cell
    assert kv_bytes(info, KvShape(ctx=1000, slots=3, unified=True))[0] == 1024 * per_cell


# --- through the CLI ------------------------------------------------------------------------

def _agent(*args: str, home: Path, path: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DFLASH_AGENT_HOME": str(home), "PATH": path, "NO_COLOR": "1",
           "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True,
                          timeout=600, env=env, stdin=subprocess.DEVNULL)


def test_backend_up_refuses_then_force_launches(engine, gemma_files, agent_home: Path,
                                                tmp_path: Path):
    from backend.engine.registry import register_system

    register_system(engine.binary)
    target = gemma_files[0]
    (agent_home / "config").mkdir(parents=True, exist_ok=True)
    (agent_home / "config" / "presets.toml").write_text(
        f'[big]\nmodel = "{target}"\nprofile = "baseline"\n'
        'ctx_size = 32768\n[big.server]\ngpu_layers = "all"\ncache_type_k = "q5_0"\n'
        'cache_type_v = "q4_1"\nswa_full = true\n')
    fake = fake_nvidia_smi(tmp_path / "bin", gpu_line())
    path = f"{fake}:{os.path.dirname(shutil.which('sh') or '/bin/sh')}"
    refused = _agent("backend", "up", "--preset", "big", home=agent_home, path=path)
    assert refused.returncode == 3, refused.stderr
    assert "does not fit this machine" in refused.stderr
    assert "GPU: needs" in refused.stderr and "try --ctx-size" in refused.stderr
    forced = _agent("backend", "up", "--preset", "big", "--force", home=agent_home, path=path)
    # The check is skipped; llama-server itself then cannot load a header-only model.
    assert forced.returncode == 3
    assert "--force: launching although" in forced.stderr
    assert "llama-server exited" in forced.stderr, forced.stderr


def test_a_running_server_for_the_plan_is_not_rechecked(real_server, shared_home: Path,
                                                        gpu_path):
    from tests.conftest import home_env

    state = real_server("baseline")
    gpu_path(stdout=gpu_line(1))  # a GPU with no free memory: a fresh check would refuse
    with home_env(shared_home):
        assert check_fit(state.plan) is None
        bigger = state.plan.model_copy(update={"ctx_size": state.plan.ctx_size * 2})
        with pytest.raises(FitError, match="short by"):
            check_fit(bigger)
