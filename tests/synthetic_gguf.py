"""Header-only GGUF files for big models: every metadata key and tensor description of the real
file, no tensor data (a few hundred KiB on disk, tens of GB described).

* :func:`write_gemma4_31b_header` — a Gemma 4 31B IT target with the keys llama.cpp b11434's
  converter writes for Gemma 4 (``conversion/gemma.py``: per-layer ``head_count_kv`` and
  ``sliding_window_pattern`` arrays, ``key_length_swa``/``value_length_swa``, ``shared_kv_layers``)
  and shapes modelled on the published config: 60 layers, width 5376, 32 heads, sliding layers
  16 KV heads x 256, every sixth layer full attention with 4 KV heads x 512 and K = V (no V
  projection), window 1024, FFN 21504, vocabulary 262144. Big matrices are Q4_K (about the size
  of the seed's Q4_K_S file).
* :func:`write_dflash_draft_header` — an upstream-format ``dflash`` draft for it (5 layers, Q5_K),
  about the seed's 1.09 GB draft.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

GEMMA4_LAYERS = 60
GEMMA4_EMBD = 5376
GEMMA4_FF = 21504
GEMMA4_VOCAB = 262144
GEMMA4_HEADS = 32
GEMMA4_SWA_KV, GEMMA4_SWA_DIM = 16, 256
GEMMA4_FULL_KV, GEMMA4_FULL_DIM = 4, 512
GEMMA4_WINDOW = 1024
Q = gguf.GGMLQuantizationType


def _tensor(writer: gguf.GGUFWriter, name: str, ne: tuple[int, ...], qtype: Q) -> None:
    """Describe tensor ``name`` with ggml shape ``ne`` (``ne0`` first) and no data."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = int(np.prod(ne))
    writer.add_tensor_info(name, list(reversed(ne)), np.dtype(np.float32), n // block * size,
                           raw_dtype=qtype)


def _write_header(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()


def gemma4_swa_layers() -> list[bool]:
    """Five sliding-window layers, then one full-attention layer, repeated."""
    return [il % 6 != 5 for il in range(GEMMA4_LAYERS)]


def write_gemma4_31b_header(path: Path) -> Path:
    """Write the Gemma 4 31B header to ``path`` and return it."""
    arch = "gemma4"
    w = gguf.GGUFWriter(path, arch)
    swa = gemma4_swa_layers()
    w.add_name("gemma-4-31B-it (synthetic header)")
    w.add_context_length(262144)
    w.add_embedding_length(GEMMA4_EMBD)
    w.add_block_count(GEMMA4_LAYERS)
    w.add_feed_forward_length(GEMMA4_FF)
    w.add_head_count(GEMMA4_HEADS)
    w.add_head_count_kv([GEMMA4_SWA_KV if s else GEMMA4_FULL_KV for s in swa])
    w.add_key_length(GEMMA4_FULL_DIM)
    w.add_value_length(GEMMA4_FULL_DIM)
    w.add_key_length_swa(GEMMA4_SWA_DIM)
    w.add_value_length_swa(GEMMA4_SWA_DIM)
    w.add_sliding_window(GEMMA4_WINDOW)
    w.add_sliding_window_pattern(swa)
    w.add_shared_kv_layers(0)
    w.add_embedding_length_per_layer_input(0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(1_000_000.0)
    _tensor(w, "token_embd.weight", (GEMMA4_EMBD, GEMMA4_VOCAB), Q.Q4_K)
    _tensor(w, "output_norm.weight", (GEMMA4_EMBD,), Q.F32)
    for il, is_swa in enumerate(swa):
        kv, dim = (GEMMA4_SWA_KV, GEMMA4_SWA_DIM) if is_swa else (GEMMA4_FULL_KV, GEMMA4_FULL_DIM)
        p = f"blk.{il}."
        _tensor(w, p + "attn_q.weight", (GEMMA4_EMBD, GEMMA4_HEADS * dim), Q.Q4_K)
        _tensor(w, p + "attn_k.weight", (GEMMA4_EMBD, kv * dim), Q.Q4_K)
        if is_swa:
            _tensor(w, p + "attn_v.weight", (GEMMA4_EMBD, kv * dim), Q.Q4_K)
        _tensor(w, p + "attn_output.weight", (GEMMA4_HEADS * dim, GEMMA4_EMBD), Q.Q4_K)
        for norm, n in (("attn_norm", GEMMA4_EMBD), ("attn_q_norm", dim), ("attn_k_norm", dim),
                        ("post_attention_norm", GEMMA4_EMBD), ("ffn_norm", GEMMA4_EMBD),
                        ("post_ffw_norm", GEMMA4_EMBD)):
            _tensor(w, f"{p}{norm}.weight", (n,), Q.F32)
        _tensor(w, p + "ffn_gate.weight", (GEMMA4_EMBD, GEMMA4_FF), Q.Q4_K)
        _tensor(w, p + "ffn_up.weight", (GEMMA4_EMBD, GEMMA4_FF), Q.Q4_K)
        _tensor(w, p + "ffn_down.weight", (GEMMA4_FF, GEMMA4_EMBD), Q.Q4_K)
    _write_header(w)
    return path


DRAFT_LAYERS, DRAFT_KV, DRAFT_DIM, DRAFT_FF = 5, 8, 128, 16384


def write_dflash_draft_header(path: Path) -> Path:
    """Write an upstream-format DFlash draft header for the Gemma 4 31B target to ``path``."""
    arch = "dflash"
    w = gguf.GGUFWriter(path, arch)
    w.add_embedding_length(GEMMA4_EMBD)
    w.add_block_count(DRAFT_LAYERS)
    w.add_feed_forward_length(DRAFT_FF)
    w.add_head_count(GEMMA4_HEADS)
    w.add_head_count_kv(DRAFT_KV)
    w.add_key_length(DRAFT_DIM)
    w.add_value_length(DRAFT_DIM)
    w.add_context_length(262144)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_uint32("dflash.block_size", 16)
    w.add_array("dflash.target_layers", [2, 12, 24, 36, 48])
    _tensor(w, "fc.weight", (5 * GEMMA4_EMBD, GEMMA4_EMBD), Q.Q5_K)
    _tensor(w, "enc.output_norm.weight", (GEMMA4_EMBD,), Q.F32)
    _tensor(w, "output_norm.weight", (GEMMA4_EMBD,), Q.F32)
    for il in range(DRAFT_LAYERS):
        p = f"blk.{il}."
        _tensor(w, p + "attn_q.weight", (GEMMA4_EMBD, GEMMA4_HEADS * DRAFT_DIM), Q.Q5_K)
        _tensor(w, p + "attn_k.weight", (GEMMA4_EMBD, DRAFT_KV * DRAFT_DIM), Q.Q5_K)
        _tensor(w, p + "attn_v.weight", (GEMMA4_EMBD, DRAFT_KV * DRAFT_DIM), Q.Q5_K)
        _tensor(w, p + "attn_output.weight", (GEMMA4_HEADS * DRAFT_DIM, GEMMA4_EMBD), Q.Q5_K)
        for norm, n in (("attn_norm", GEMMA4_EMBD), ("attn_q_norm", DRAFT_DIM),
                        ("attn_k_norm", DRAFT_DIM), ("ffn_norm", GEMMA4_EMBD)):
            _tensor(w, f"{p}{norm}.weight", (n,), Q.F32)
        _tensor(w, p + "ffn_gate.weight", (GEMMA4_EMBD, DRAFT_FF), Q.Q5_K)
        _tensor(w, p + "ffn_up.weight", (GEMMA4_EMBD, DRAFT_FF), Q.Q5_K)
        _tensor(w, p + "ffn_down.weight", (DRAFT_FF, GEMMA4_EMBD), Q.Q5_K)
    _write_header(w)
    return path
