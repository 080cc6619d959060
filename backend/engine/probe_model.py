"""A tiny GGUF model for checking that an engine runs when no real model is cached yet.

Random weights, so its text is noise; what matters is that ``llama-server`` loads it and runs a
real forward pass through the CPU backend's quantised kernels: the matrices are Q4_0 (the type
weight repacking converts on x86 and ARM, and AMX takes), rows a multiple of 8 as repacking
wants. The tokenizer is SentencePiece-style with only the three control tokens and the 256
byte tokens (``<0x00>``…), so any prompt tokenizes through byte fallback.
"""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np
from gguf.quants import quantize

N_EMBD, N_HEAD, N_FF, N_LAYER, N_CTX = 128, 4, 256, 2, 512
_Q = gguf.GGMLQuantizationType
_TOKEN = gguf.TokenType


def _vocab() -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [_TOKEN.UNKNOWN, _TOKEN.CONTROL, _TOKEN.CONTROL] + [_TOKEN.BYTE] * 256
    return tokens, [0.0] * len(tokens), [int(t) for t in types]


def write_probe_model(path: Path, seed: int = 0) -> Path:
    """Write the probe model to ``path`` (about 250 KiB; atomically) and return ``path``.

    A 2-layer llama (width 128, 4 heads, FFN 256, context 512, vocabulary 259); norms f32,
    embeddings f16, every other matrix Q4_0. Raises ``OSError`` when ``path`` is not writable.
    """
    tokens, scores, types = _vocab()
    rng = np.random.default_rng(seed)
    arch = "llama"
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(tmp, arch)
    writer.add_name("dflash-agent engine probe (random weights)")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)

    def matrix(ne0: int, ne1: int) -> np.ndarray:
        return (rng.standard_normal((ne1, ne0)) * 0.05).astype(np.float32)

    def q4(name: str, ne0: int, ne1: int) -> None:
        writer.add_tensor(name, quantize(matrix(ne0, ne1), _Q.Q4_0), raw_dtype=_Q.Q4_0)

    writer.add_tensor("token_embd.weight", matrix(N_EMBD, len(tokens)).astype(np.float16))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    writer.add_tensor("output.weight", matrix(N_EMBD, len(tokens)).astype(np.float16))
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for part in ("q", "k", "v", "output"):
            q4(f"blk.{i}.attn_{part}.weight", N_EMBD, N_EMBD)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        q4(f"blk.{i}.ffn_gate.weight", N_EMBD, N_FF)
        q4(f"blk.{i}.ffn_up.weight", N_EMBD, N_FF)
        q4(f"blk.{i}.ffn_down.weight", N_FF, N_EMBD)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, path)
    return path
