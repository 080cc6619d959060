"""benchmarks/shaped_target.py: a zero-weight llama target of a chosen shape and a random upstream
``dflash`` draft for it, written for a tiny shape and read back (no engine, no download)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from backend.models.ggufinfo import read_gguf_info
from benchmarks import shaped_target as st

N_VOCAB = 300
MASK_ID = 16
TINY = ["--n-embd", "64", "--n-layer", "4", "--n-head", "4", "--n-head-kv", "2",
        "--n-ff", "128", "--n-ctx", "1024"]


@pytest.fixture
def tokenizer(tmp_path: Path) -> Path:
    """A vocab-only GGUF: a small gpt2-style tokenizer with ``<empty_output>`` at id 16."""
    tokens = [f"tok{i}" for i in range(N_VOCAB)]
    tokens[0], tokens[MASK_ID] = "<|endoftext|>", "<empty_output>"
    path = tmp_path / "vocab.gguf"
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.CONTROL] + [gguf.TokenType.NORMAL] * (N_VOCAB - 1))
    writer.add_token_merges(["t o", "to k"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)
    writer.add_chat_template("{{ messages }}")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _fields(path: Path) -> tuple[gguf.GGUFReader, dict[str, object]]:
    reader = gguf.GGUFReader(path)
    return reader, {name: f.contents() for name, f in reader.fields.items()}


def test_a_tiny_shape_writes_a_matching_target_and_draft(tmp_path: Path, tokenizer: Path):
    out = tmp_path / "out"
    assert st.main(["--tokenizer-from", str(tokenizer), "--out", str(out), *TINY,
                    "--target-layers", "1,2"]) == 0

    reader, meta = _fields(out / "target.gguf")
    assert meta["general.architecture"] == "llama"
    assert meta["llama.embedding_length"] == 64 and meta["llama.block_count"] == 4
    assert meta["llama.attention.head_count"] == 4
    assert meta["llama.attention.head_count_kv"] == 2
    assert meta["llama.feed_forward_length"] == 128 and meta["llama.rope.dimension_count"] == 16
    tensors = {t.name: t for t in reader.tensors}
    assert len(tensors) == 3 + 4 * 9
    assert list(tensors["token_embd.weight"].shape) == [64, N_VOCAB]  # ggml {ne0, ne1}
    assert list(tensors["output.weight"].shape) == [64, N_VOCAB]
    assert list(tensors["blk.3.attn_k.weight"].shape) == [64, 2 * 16]
    assert list(tensors["blk.0.ffn_down.weight"].shape) == [128, 64]
    assert tensors["blk.0.ffn_up.weight"].tensor_type == gguf.GGMLQuantizationType.F16
    assert tensors["blk.0.attn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    assert not np.any(tensors["blk.2.attn_q.weight"].data)  # zeros (a hole on disk)
    assert not np.any(tensors["token_embd.weight"].data)
    assert np.all(tensors["output_norm.weight"].data == 1)
    info = read_gguf_info(out / "target.gguf")
    assert info.complete and info.n_vocab == N_VOCAB and info.head_dim_k == 16

    draft, dmeta = _fields(out / "draft.gguf")
    assert dmeta["general.architecture"] == "dflash"
    assert dmeta["dflash.block_size"] == 16 and dmeta["dflash.block_count"] == 1
    assert dmeta["dflash.target_layers"] == [1, 2]
    assert draft.fields["dflash.target_layers"].types[-1] == gguf.GGUFValueType.INT32
    assert dmeta["tokenizer.ggml.mask_token_id"] == MASK_ID  # <empty_output>, as v1
    assert dmeta["dflash.embedding_length"] == meta["llama.embedding_length"]
    assert dmeta["dflash.context_length"] == meta["llama.context_length"] == 1024
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.model",
                "tokenizer.chat_template", "tokenizer.ggml.eos_token_id"):
        assert dmeta[key] == meta[key], key
    dt = {t.name: t for t in draft.tensors}
    assert list(dt["fc.weight"].shape) == [2 * 64, 64]
    assert list(dt["blk.0.attn_q_norm.weight"].shape) == [16]
    assert list(dt["blk.0.ffn_gate.weight"].shape) == [64, 128]
    assert {"enc.output_norm.weight", "output_norm.weight", "blk.0.ffn_norm.weight",
            "blk.0.attn_k_norm.weight"} <= set(dt)
    assert not {"token_embd.weight", "output.weight"} & set(dt)
    assert np.any(dt["blk.0.attn_v.weight"].data)  # random
    assert read_gguf_info(out / "draft.gguf").complete


def test_random_embeddings_and_dense_zeros(tmp_path: Path, tokenizer: Path):
    out = tmp_path / "out"
    assert st.main(["--tokenizer-from", str(tokenizer), "--out", str(out), *TINY,
                    "--random-embeddings", "--dense", "--no-draft"]) == 0
    assert not (out / "draft.gguf").exists()
    tensors = {t.name: t for t in gguf.GGUFReader(out / "target.gguf").tensors}
    assert np.any(tensors["token_embd.weight"].data) and np.any(tensors["output.weight"].data)
    assert not np.any(tensors["blk.1.ffn_gate.weight"].data)


def test_the_default_is_the_7_4b_shape_of_speculation_costs():
    shape = st.Shape()
    tensors = st.target_tensors(shape, 49152, random_embeddings=False)
    params = sum(int(np.prod(t.shape)) for t in tensors)
    assert 7.3e9 < params < 7.5e9
    assert 14.7e9 < sum(t.nbytes for t in tensors) < 14.9e9
    assert st.default_target_layers(32) == [2, 16, 30]
    assert st.default_target_layers(30) == [2, 15, 28]  # the v1 draft's, for SmolLM2
    draft = st.draft_tensors(st.Shape(n_layer=1), 3, np.float16)
    assert 535e6 < sum(t.nbytes for t in draft) < 545e6  # "random 1-layer draft 539 MB"


@pytest.mark.parametrize("args", [["--target-layers", "1,3"], ["--target-layers", "2,1"],
                                  ["--n-head", "3"], ["--n-head-kv", "3"]])
def test_bad_shapes_and_layers_are_refused(tmp_path: Path, tokenizer: Path, args: list[str],
                                           capsys: pytest.CaptureFixture[str]):
    assert st.main(["--tokenizer-from", str(tokenizer), "--out", str(tmp_path / "o"), *TINY,
                    *args]) == 2
    assert "shaped_target:" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
