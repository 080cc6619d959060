"""The fit check prices BeeLlama ≤0.3's TurboQuant KV caches (turbo2/3/4 and the TCQ types) the
way v0.3.1 allocates them, and refuses them where v0.3.1 would (KV in host memory). The real
binary's own refusal is checked in tests/test_beellama_real.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from backend.models.ggufinfo import read_gguf_info
from backend.models.presets import ServerOptions, get_preset
from backend.serve.fit import FitError, check_fit
from backend.serve.profiles import LaunchPlan
from backend.serve.sizes import KvShape, kv_bytes, kv_row_bytes, row_bytes
from tests.fake_tools import fake_nvidia_smi, gpu_line
from tests.synthetic_gguf import write_dflash_draft_header, write_gemma4_31b_header

MIB = 2**20
TURBO4 = ServerOptions(cache_type_k="turbo4", cache_type_v="turbo4", flash_attn="on")


@pytest.fixture
def gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``gpu(stdout)`` puts a stand-in nvidia-smi on PATH; ``gpu(None)`` leaves none."""
    def put(stdout: str | None = gpu_line()) -> None:
        bin_dir = tmp_path / "fakebin"
        if stdout is None:
            bin_dir.mkdir(exist_ok=True)
        else:
            fake_nvidia_smi(bin_dir, stdout)
        monkeypatch.setenv("PATH", str(bin_dir))
    return put


def _plan(model: Path, options: ServerOptions, ctx: int = 8192,
          draft: Path | None = None) -> LaunchPlan:
    return LaunchPlan(binary=Path(sys.executable), model=model, draft=draft,
                      profile="dflash" if draft else "baseline", ctx_size=ctx, options=options)


def test_turbo_rows_pad_each_head_to_128_values():
    # sizeof(block_turbo*) per 128 values: turbo2 34, turbo3 50, turbo4 66, tcq 36 / 52.
    assert kv_row_bytes("turbo4", 3, 64) == 3 * 66  # SmolLM2: 64 padded to 128
    assert kv_row_bytes("turbo4", 8, 128) == 8 * 66
    assert kv_row_bytes("turbo3", 16, 256) == 16 * 2 * 50
    assert kv_row_bytes("turbo2", 4, 512) == 4 * 4 * 34
    assert kv_row_bytes("turbo3_tcq", 1, 128) == 52 and kv_row_bytes("turbo2_tcq", 1, 128) == 36
    assert kv_row_bytes("turbo4", 2, 576) == row_bytes("f16", 2 * 576)  # over 512: f16
    assert kv_row_bytes("q8_0", 3, 64) == row_bytes("q8_0", 192)


def test_smollm2_turbo4_on_a_gpu_is_priced_below_f16(smollm2: Path, gpu):
    gpu(gpu_line())
    # Heads of 64: only without flash attention (BeeLlama pads them to 128 and turns it on).
    options = TURBO4.model_copy(update={"gpu_layers": "all", "flash_attn": "off"})
    report = check_fit(_plan(smollm2, options))
    assert report is not None and report.fits
    kv = {c.name: c for c in report.components}["target KV cache (turbo4/turbo4)"]
    assert kv.where == "gpu"
    assert kv.mib == pytest.approx(8192 * 30 * 2 * 3 * 66 / MIB)  # 90 MiB; f16 would be 180
    info = read_gguf_info(smollm2)
    f16 = kv_bytes(info, KvShape(ctx=8192))[0]
    assert kv.mib * MIB == pytest.approx(f16 * 66 / 128)


def test_turbo4_with_flash_attention_needs_heads_of_128(smollm2: Path, gpu):
    gpu(gpu_line())
    for fa in ("on", None):  # None: the server's default, auto
        options = TURBO4.model_copy(update={"gpu_layers": "all", "flash_attn": fa})
        with pytest.raises(FitError) as caught:
            check_fit(_plan(smollm2, options))
        text = str(caught.value)
        assert "the K cache type turbo4 stores blocks of 128 values, which do not divide this " \
            "model's K head size (64) with flash attention on" in text
        assert 'set flash_attn = "off"' in text
    q4 = ServerOptions(cache_type_k="q4_0", cache_type_v="q4_0", gpu_layers="all")
    report = check_fit(_plan(smollm2, q4))
    assert report is not None and report.fits  # blocks of 32 divide 64


def test_turbo_kv_without_a_gpu_is_refused_with_the_reason(smollm2: Path, gpu):
    gpu(None)
    no_fa = TURBO4.model_copy(update={"flash_attn": "off"})
    with pytest.raises(FitError) as caught:
        check_fit(_plan(smollm2, no_fa))
    text = str(caught.value)
    assert "cannot run on this machine: the TurboQuant KV cache (turbo4) must be entirely on a " \
        "GPU" in text and "no GPU answered nvidia-smi" in text
    assert "choose another KV cache type" in text
    assert caught.value.report.suggested_ctx is None
    gpu(gpu_line())
    with pytest.raises(FitError, match="gpu_layers = 10 keeps part of it in host memory"):
        check_fit(_plan(smollm2, no_fa.model_copy(update={"gpu_layers": "10"})))


def test_the_turbo4_gemma_preset_fits_more_context_than_q5_0_q4_1(tmp_path: Path, gpu):
    gpu(gpu_line())
    target = write_gemma4_31b_header(tmp_path / "t.gguf")
    draft = write_dflash_draft_header(tmp_path / "d.gguf")
    turbo, seed = get_preset("gemma4-31b-dflash-turbo4"), get_preset("gemma4-31b-dflash")
    assert (turbo.server.cache_type_k, turbo.server.cache_type_v) == ("turbo4", "turbo4")
    assert turbo.server.model_copy(update={"cache_type_k": "q5_0", "cache_type_v": "q4_1"}) \
        == seed.server  # otherwise the seed's setup
    t_report = check_fit(_plan(target, turbo.server, 32768, draft))
    s_report = check_fit(_plan(target, seed.server, 32768, draft))
    assert t_report is not None and s_report is not None and t_report.fits
    t_kv = {c.name: c.mib for c in t_report.components}
    s_kv = {c.name: c.mib for c in s_report.components}
    # Gemma 4 31B: 10 global layers x 4 KV heads x 512, 50 sliding layers x 16 x 256.
    assert t_kv["target KV cache (turbo4/turbo4)"] == pytest.approx(
        10 * 32768 * 2 * 4 * (512 // 128) * 66 / MIB)
    assert t_kv["target KV cache (turbo4/turbo4)"] < s_kv["target KV cache (q5_0/q4_1)"]
    assert t_kv["draft KV cache (f16)"] == s_kv["draft KV cache (f16)"]  # the draft stays f16
