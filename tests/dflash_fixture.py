"""Tiny random GGUF models that exercise llama.cpp's DFlash speculative-decoding path on CPU.

* :func:`write_tiny_target` — a 64-wide, 4-layer llama model carrying a real tokenizer (copied
  from another GGUF, e.g. SmolLM2), so a draft can share it.
* :func:`write_tiny_dflash_draft` — a 1-layer draft in the upstream ``dflash`` format
  (llama.cpp b11434) that borrows the target's token embeddings and output head.
* :func:`write_old_format_draft` — the same draft in BeeLlama ≤ v0.3's ``dflash-draft`` format,
  which upstream refuses (input for a ``convert-draft`` command).

All weights are random (acceptance ~0); the files only prove that the path loads and drafts.
Shapes are given in ggml order ``{ne0, ne1}``; numpy arrays are written as ``(ne1, ne0)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from train.export import raw_field

N_EMBD = 64
N_LAYER = 4
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 128
N_CTX = 2048
ROPE_FREQ_BASE = 10000.0
RMS_EPS = 1e-5
BLOCK_SIZE = 16

_TOKENIZER_PREFIX = "tokenizer."


def _tokenizer_fields(reader: gguf.GGUFReader) -> list[tuple[str, Any, gguf.GGUFValueType,
                                                           gguf.GGUFValueType | None]]:
    """Every ``tokenizer.*`` key of ``reader``'s GGUF (tokens, merges, ids, chat template…)
    with its exact stored type, ready for :meth:`gguf.GGUFWriter.add_key_value`."""
    return [(name, *raw_field(field)) for name, field in reader.fields.items()
            if name.startswith(_TOKENIZER_PREFIX)]


def _n_vocab(fields: Sequence[tuple[str, Any, Any, Any]]) -> int:
    for name, value, _, _ in fields:
        if name == "tokenizer.ggml.tokens":
            return len(value)
    raise ValueError("the tokenizer GGUF has no tokenizer.ggml.tokens")


def _copy_tokenizer(writer: gguf.GGUFWriter,
                    fields: Sequence[tuple[str, Any, gguf.GGUFValueType,
                                           gguf.GGUFValueType | None]],
                    skip: frozenset[str] = frozenset()) -> None:
    for name, value, vtype, sub in fields:
        if name not in skip:
            writer.add_key_value(name, value, vtype, sub)


def _u32(writer: gguf.GGUFWriter, key: str, value: int) -> None:
    writer.add_key_value(key, int(value), gguf.GGUFValueType.UINT32)


def _f32(writer: gguf.GGUFWriter, key: str, value: float) -> None:
    writer.add_key_value(key, float(value), gguf.GGUFValueType.FLOAT32)


def _matrix(rng: np.random.Generator, ne0: int, ne1: int) -> np.ndarray:
    """A random f16 ggml matrix ``{ne0, ne1}`` (numpy shape ``(ne1, ne0)``)."""
    return (rng.standard_normal((ne1, ne0)) * 0.02).astype(np.float16)


def _norm(n: int) -> np.ndarray:
    """An f32 RMS-norm weight of ones (ggml ``{n}``)."""
    return np.ones(n, dtype=np.float32)


def _finish(writer: gguf.GGUFWriter) -> None:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_tiny_target(path: Path, tokenizer_from: Path, seed: int = 0) -> Path:
    """Write a random 4-layer llama GGUF (n_embd 64, 4 heads / 2 KV heads, ffn 128, context
    2048, f16 matrices, f32 norms) with the tokenizer of ``tokenizer_from``; returns ``path``.

    Token embeddings and the output head are ``{64, n_vocab}`` for that tokenizer's vocab.
    """
    fields = _tokenizer_fields(gguf.GGUFReader(tokenizer_from))
    n_vocab = _n_vocab(fields)
    rng = np.random.default_rng(seed)
    head_dim = N_EMBD // N_HEAD
    arch = "llama"
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name("tiny-random-llama")
    _u32(writer, f"{arch}.context_length", N_CTX)
    _u32(writer, f"{arch}.embedding_length", N_EMBD)
    _u32(writer, f"{arch}.block_count", N_LAYER)
    _u32(writer, f"{arch}.feed_forward_length", N_FF)
    _u32(writer, f"{arch}.attention.head_count", N_HEAD)
    _u32(writer, f"{arch}.attention.head_count_kv", N_HEAD_KV)
    _u32(writer, f"{arch}.rope.dimension_count", head_dim)
    _u32(writer, f"{arch}.vocab_size", n_vocab)
    _f32(writer, f"{arch}.rope.freq_base", ROPE_FREQ_BASE)
    _f32(writer, f"{arch}.attention.layer_norm_rms_epsilon", RMS_EPS)
    _copy_tokenizer(writer, fields)

    writer.add_tensor("token_embd.weight", _matrix(rng, N_EMBD, n_vocab))
    writer.add_tensor("output_norm.weight", _norm(N_EMBD))
    writer.add_tensor("output.weight", _matrix(rng, N_EMBD, n_vocab))
    for i in range(N_LAYER):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", _norm(N_EMBD))
        writer.add_tensor(f"blk.{i}.attn_q.weight", _matrix(rng, N_EMBD, N_HEAD * head_dim))
        writer.add_tensor(f"blk.{i}.attn_k.weight", _matrix(rng, N_EMBD, N_HEAD_KV * head_dim))
        writer.add_tensor(f"blk.{i}.attn_v.weight", _matrix(rng, N_EMBD, N_HEAD_KV * head_dim))
        writer.add_tensor(f"blk.{i}.attn_output.weight", _matrix(rng, N_HEAD * head_dim, N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", _norm(N_EMBD))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", _matrix(rng, N_EMBD, N_FF))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", _matrix(rng, N_EMBD, N_FF))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", _matrix(rng, N_FF, N_EMBD))
    _finish(writer)
    return path


def _draft_tensors(writer: gguf.GGUFWriter, rng: np.random.Generator, n_embd: int,
                   n_target_layers: int, *, fc: str, hidden_norm: str,
                   pre_ffn_norm: str) -> None:
    """The one-layer draft's tensors; the three names that differ between formats are given."""
    head_dim = n_embd // N_HEAD
    writer.add_tensor(f"{fc}.weight", _matrix(rng, n_target_layers * n_embd, n_embd))
    writer.add_tensor(f"{hidden_norm}.weight", _norm(n_embd))
    writer.add_tensor("output_norm.weight", _norm(n_embd))
    writer.add_tensor("blk.0.attn_norm.weight", _norm(n_embd))
    writer.add_tensor("blk.0.attn_q.weight", _matrix(rng, n_embd, N_HEAD * head_dim))
    writer.add_tensor("blk.0.attn_k.weight", _matrix(rng, n_embd, N_HEAD_KV * head_dim))
    writer.add_tensor("blk.0.attn_v.weight", _matrix(rng, n_embd, N_HEAD_KV * head_dim))
    writer.add_tensor("blk.0.attn_output.weight", _matrix(rng, N_HEAD * head_dim, n_embd))
    writer.add_tensor("blk.0.attn_q_norm.weight", _norm(head_dim))
    writer.add_tensor("blk.0.attn_k_norm.weight", _norm(head_dim))
    writer.add_tensor(f"blk.0.{pre_ffn_norm}.weight", _norm(n_embd))
    writer.add_tensor("blk.0.ffn_gate.weight", _matrix(rng, n_embd, N_FF))
    writer.add_tensor("blk.0.ffn_up.weight", _matrix(rng, n_embd, N_FF))
    writer.add_tensor("blk.0.ffn_down.weight", _matrix(rng, N_FF, n_embd))


def _draft_generic_keys(writer: gguf.GGUFWriter, arch: str, n_embd: int) -> None:
    _u32(writer, f"{arch}.context_length", N_CTX)
    _u32(writer, f"{arch}.embedding_length", n_embd)
    _u32(writer, f"{arch}.block_count", 1)
    _u32(writer, f"{arch}.feed_forward_length", N_FF)
    _u32(writer, f"{arch}.attention.head_count", N_HEAD)
    _u32(writer, f"{arch}.attention.head_count_kv", N_HEAD_KV)
    _f32(writer, f"{arch}.attention.layer_norm_rms_epsilon", RMS_EPS)
    _f32(writer, f"{arch}.rope.freq_base", ROPE_FREQ_BASE)


def _check_layers(reader: gguf.GGUFReader, target_layers: Sequence[int]) -> int:
    """The target's n_embd, after checking ``target_layers`` (upstream ids) fit inside it."""
    arch = raw_field(reader.fields["general.architecture"])[0].decode()
    n_embd = int(raw_field(reader.fields[f"{arch}.embedding_length"])[0])
    n_layer = int(raw_field(reader.fields[f"{arch}.block_count"])[0])
    if not target_layers or any(not 0 <= i < n_layer - 1 for i in target_layers):
        raise ValueError(f"target_layers {list(target_layers)} must be non-empty and inside "
                         f"0..{n_layer - 2} (below the target's last layer)")
    return n_embd


def _default_mask_id(n_vocab: int) -> int:
    """The last vocab entry: SmolLM2's vocab has no mask token, and any id works for random
    weights."""
    return n_vocab - 1


def write_tiny_dflash_draft(path: Path, target: Path, target_layers: Sequence[int] = (1, 2),
                            mask_token_id: int | None = None, seed: int = 1) -> Path:
    """Write a random 1-layer upstream-format DFlash draft for ``target``; returns ``path``.

    Arch ``dflash``; ``dflash.block_size`` = 16 and ``dflash.target_layers`` = ``target_layers``
    (upstream ids: the *input* of that target layer); ``tokenizer.ggml.mask_token_id``
    (default: the last vocab id); the target's tokenizer keys. Tensors: ``fc.weight``
    {n_target_layers·n_embd, n_embd}, ``enc.output_norm.weight``, ``output_norm.weight`` and
    block 0's attention (with q/k norms) and FFN (``ffn_norm``). No token embeddings or output
    head: llama.cpp takes them from the target.
    """
    reader = gguf.GGUFReader(target)
    n_embd = _check_layers(reader, target_layers)
    fields = _tokenizer_fields(reader)
    mask = _default_mask_id(_n_vocab(fields)) if mask_token_id is None else mask_token_id
    arch = "dflash"
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name("tiny-random-dflash-draft")
    _draft_generic_keys(writer, arch, n_embd)
    _u32(writer, f"{arch}.block_size", BLOCK_SIZE)
    writer.add_key_value(f"{arch}.target_layers", [int(i) for i in target_layers],
                         gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32)
    _copy_tokenizer(writer, fields, skip=frozenset({"tokenizer.ggml.mask_token_id"}))
    _u32(writer, "tokenizer.ggml.mask_token_id", mask)
    _draft_tensors(writer, np.random.default_rng(seed), n_embd, len(target_layers),
                   fc="fc", hidden_norm="enc.output_norm", pre_ffn_norm="ffn_norm")
    _finish(writer)
    return path


def write_old_format_draft(path: Path, target: Path, target_layers: Sequence[int] = (1, 2),
                           mask_token_id: int | None = None, seed: int = 1) -> Path:
    """Write the same random draft in BeeLlama ≤ v0.3's ``dflash-draft`` format; returns ``path``.

    ``target_layers`` are given as *upstream* ids (as for :func:`write_tiny_dflash_draft`) and
    stored as HF ids (each − 1, layer outputs) in ``dflash-draft.dflash.target_layer_ids``
    (u32 array). Also ``dflash-draft.dflash.block_size``, ``dflash-draft.dflash.mask_token_id``
    and ``dflash-draft.dflash.n_target_features`` (= n_target_layers·n_embd, the width of
    ``dflash_fc``), and ``dflash-draft.attention.causal = false`` as BeeLlama's converter
    writes it. Tensors: ``dflash_fc.weight``, ``dflash_hidden_norm.weight``,
    ``output_norm.weight``, and per layer ``post_attention_norm`` where upstream has
    ``ffn_norm``; no token embeddings or output head.
    """
    reader = gguf.GGUFReader(target)
    n_embd = _check_layers(reader, target_layers)
    if any(i < 1 for i in target_layers):
        raise ValueError("upstream layer 0's input is the embeddings: no HF layer id for it")
    fields = _tokenizer_fields(reader)
    mask = _default_mask_id(_n_vocab(fields)) if mask_token_id is None else mask_token_id
    arch = "dflash-draft"
    writer = gguf.GGUFWriter(path, arch)
    writer.add_name("tiny-random-dflash-draft-old")
    _draft_generic_keys(writer, arch, n_embd)
    _u32(writer, f"{arch}.dflash.block_size", BLOCK_SIZE)
    _u32(writer, f"{arch}.dflash.mask_token_id", mask)
    _u32(writer, f"{arch}.dflash.n_target_features", len(target_layers) * n_embd)
    writer.add_key_value(f"{arch}.dflash.target_layer_ids", [int(i) - 1 for i in target_layers],
                         gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT32)
    # BeeLlama's own converter (conversion/dflash.py, v0.3.1) marks the draft non-causal.
    writer.add_key_value(f"{arch}.attention.causal", False, gguf.GGUFValueType.BOOL)
    _copy_tokenizer(writer, fields, skip=frozenset({"tokenizer.ggml.mask_token_id"}))
    _draft_tensors(writer, np.random.default_rng(seed), n_embd, len(target_layers),
                   fc="dflash_fc", hidden_norm="dflash_hidden_norm",
                   pre_ffn_norm="post_attention_norm")
    _finish(writer)
    return path
