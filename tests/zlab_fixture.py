"""Tiny random DFlash drafters in z-lab's Hugging Face format, and the target's tokenizer folder
the converter needs, written by the tests (numpy and json only: no torch, no transformers).

* :func:`write_zlab_drafter` — a folder like ``z-lab/Qwen3-8B-DFlash-b16``: ``config.json``
  (a Qwen3 config with ``architectures = ["DFlashDraftModel"]``, ``block_size`` and
  ``dflash_config = {mask_token_id, target_layer_ids}``) and ``model.safetensors`` (bf16) with
  the tensors of z-lab's ``DFlashDraftModel`` (dflash/model.py): ``fc``, ``hidden_norm``,
  ``norm`` and per layer ``self_attn.{q,k,v,o}_proj``, ``self_attn.{q,k}_norm``,
  ``mlp.{gate,up,down}_proj``, ``input_layernorm``, ``post_attention_layernorm``; no token
  embeddings or output head (the target's are used).
* :func:`write_tokenizer_folder` — the target's Hugging Face tokenizer files (``config.json``,
  ``tokenizer.json``, ``tokenizer_config.json``) rebuilt from a byte-level BPE GGUF's own
  tokenizer (SmolLM2's): vocabulary, merges and special tokens as the GGUF has them, so the
  converted draft's vocabulary equals the target's.
* :func:`write_safetensors` — the safetensors container (8-byte header length, JSON header,
  raw little-endian data).

Shapes follow torch: a linear layer's weight is ``(out_features, in_features)``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from pathlib import Path

import gguf
import numpy as np

N_EMBD = 64
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = N_EMBD // N_HEAD
N_FF = 128
N_CTX = 2048
TARGET_LAYERS = 4
"""The tiny target's layer count (tests/dflash_fixture.py ``N_LAYER``)."""


def _bf16(array: np.ndarray) -> bytes:
    """float32 values as bfloat16 bytes (round to nearest even)."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], dtype: str = "BF16",
                      metadata: dict[str, str] | None = None) -> Path:
    """Write ``tensors`` (float32 arrays) as one safetensors file of ``dtype`` (BF16, F16 or
    F32); returns ``path``."""
    header: dict[str, object] = {"__metadata__": metadata or {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name, array in tensors.items():
        if dtype == "BF16":
            data = _bf16(array)
        else:
            data = np.ascontiguousarray(array, dtype="<f2" if dtype == "F16" else "<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        for blob in blobs:
            fh.write(blob)
    return path


def drafter_config(n_vocab: int, target_layer_ids: Sequence[int] = (0, 1),
                   mask_token_id: int | None = None, block_size: int = 16, n_layer: int = 1,
                   architecture: str = "DFlashDraftModel",
                   sliding_window: int | None = None) -> dict[str, object]:
    """A z-lab ``config.json`` for a ``n_layer``-layer drafter of the tiny target
    (``target_layer_ids`` are Hugging Face ids: the converter writes each + 1)."""
    mask = n_vocab - 1 if mask_token_id is None else mask_token_id
    config: dict[str, object] = {
        "architectures": [architecture], "model_type": "qwen3",
        "hidden_size": N_EMBD, "intermediate_size": N_FF, "num_hidden_layers": n_layer,
        "num_attention_heads": N_HEAD, "num_key_value_heads": N_HEAD_KV, "head_dim": HEAD_DIM,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "max_position_embeddings": N_CTX, "vocab_size": n_vocab, "attention_bias": False,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "block_size": block_size, "num_target_layers": TARGET_LAYERS,
        "layer_types": ["full_attention"] * n_layer, "use_sliding_window": False,
        "dflash_config": {"mask_token_id": mask, "target_layer_ids": list(target_layer_ids)},
    }
    if sliding_window:
        config["use_sliding_window"] = True
        config["sliding_window"] = sliding_window
        config["layer_types"] = ["sliding_attention"] * n_layer
    return config


def drafter_tensors(n_target_layers: int, n_layer: int = 1, seed: int = 1
                    ) -> dict[str, np.ndarray]:
    """z-lab ``DFlashDraftModel``'s tensors, random (matrices) and ones (norms)."""
    rng = np.random.default_rng(seed)

    def mat(out: int, inp: int) -> np.ndarray:
        return (rng.standard_normal((out, inp)) * 0.02).astype(np.float32)

    tensors = {"fc.weight": mat(N_EMBD, n_target_layers * N_EMBD),
               "hidden_norm.weight": np.ones(N_EMBD, np.float32),
               "norm.weight": np.ones(N_EMBD, np.float32)}
    for i in range(n_layer):
        p = f"layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": np.ones(N_EMBD, np.float32),
            p + "self_attn.q_proj.weight": mat(N_HEAD * HEAD_DIM, N_EMBD),
            p + "self_attn.k_proj.weight": mat(N_HEAD_KV * HEAD_DIM, N_EMBD),
            p + "self_attn.v_proj.weight": mat(N_HEAD_KV * HEAD_DIM, N_EMBD),
            p + "self_attn.o_proj.weight": mat(N_EMBD, N_HEAD * HEAD_DIM),
            p + "self_attn.q_norm.weight": np.ones(HEAD_DIM, np.float32),
            p + "self_attn.k_norm.weight": np.ones(HEAD_DIM, np.float32),
            p + "post_attention_layernorm.weight": np.ones(N_EMBD, np.float32),
            p + "mlp.gate_proj.weight": mat(N_FF, N_EMBD),
            p + "mlp.up_proj.weight": mat(N_FF, N_EMBD),
            p + "mlp.down_proj.weight": mat(N_EMBD, N_FF),
        }
    return tensors


def write_zlab_drafter(folder: Path, n_vocab: int, target_layer_ids: Sequence[int] = (0, 1),
                       **config: object) -> Path:
    """Write a random z-lab drafter (``config.json`` + ``model.safetensors``) into ``folder``
    (created); ``config`` goes to :func:`drafter_config`. Returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    cfg = drafter_config(n_vocab, target_layer_ids, **config)  # type: ignore[arg-type]
    (folder / "config.json").write_text(json.dumps(cfg, indent=2))
    write_safetensors(folder / "model.safetensors",
                      drafter_tensors(len(target_layer_ids), int(cfg["num_hidden_layers"])))
    return folder


def _strings(reader: gguf.GGUFReader, key: str) -> list[str]:
    field = reader.fields[key]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def _ints(reader: gguf.GGUFReader, key: str) -> list[int]:
    field = reader.fields[key]
    return [int(field.parts[i][0]) for i in field.data]


def _scalar(reader: gguf.GGUFReader, key: str) -> object:
    field = reader.fields.get(key)
    if field is None:
        return None
    value = field.parts[field.data[0]]
    return bytes(value).decode() if field.types[0] == gguf.GGUFValueType.STRING else \
        value.tolist()[0]


def write_tokenizer_folder(folder: Path, tokenizer_gguf: Path,
                           architecture: str = "Qwen3ForCausalLM") -> Path:
    """Write the target's Hugging Face tokenizer files into ``folder`` (created) from the
    byte-level BPE tokenizer of ``tokenizer_gguf`` (``tokenizer.ggml.model = gpt2``): a
    ``tokenizer.json`` (BPE vocab and merges, ByteLevel pre-tokenizer and decoder, the GGUF's
    control tokens as special added tokens), ``tokenizer_config.json`` (its bos/eos/unk and chat
    template) and a ``config.json`` naming ``architecture`` with the tiny target's shape, as a
    target model's repository has them. Returns ``folder``."""
    reader = gguf.GGUFReader(tokenizer_gguf)
    if _scalar(reader, "tokenizer.ggml.model") != "gpt2":
        raise ValueError(f"{tokenizer_gguf}: only byte-level BPE (gpt2) tokenizers are rebuilt")
    tokens = _strings(reader, "tokenizer.ggml.tokens")
    types = _ints(reader, "tokenizer.ggml.token_type")
    merges = _strings(reader, "tokenizer.ggml.merges")
    special = [i for i, t in enumerate(types) if t == gguf.TokenType.CONTROL]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": tokens[i], "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for i in special],
        "normalizer": None, "pre_tokenizer": byte_level,
        "post_processor": {**byte_level, "trim_offsets": False},
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {tok: i for i, tok in enumerate(tokens)},
                  "merges": merges},
    }

    def tok(key: str) -> str | None:
        idx = _scalar(reader, f"tokenizer.ggml.{key}_token_id")
        return tokens[int(idx)] if isinstance(idx, int) else None  # type: ignore[arg-type]

    tok_config = {"tokenizer_class": "GPT2Tokenizer", "model_max_length": N_CTX,
                  "add_prefix_space": False, "clean_up_tokenization_spaces": False,
                  "bos_token": tok("bos"), "eos_token": tok("eos"), "unk_token": tok("unknown"),
                  "pad_token": tok("padding"),
                  "added_tokens_decoder": {str(i): {"content": tokens[i], "lstrip": False,
                                                    "normalized": False, "rstrip": False,
                                                    "single_word": False, "special": True}
                                           for i in special}}
    template = _scalar(reader, "tokenizer.chat_template")
    if isinstance(template, str):
        tok_config["chat_template"] = template
    config = {"architectures": [architecture], "model_type": "qwen3",
              "hidden_size": N_EMBD, "num_hidden_layers": TARGET_LAYERS,
              "num_attention_heads": N_HEAD, "num_key_value_heads": N_HEAD_KV,
              "intermediate_size": N_FF, "vocab_size": len(tokens),
              "max_position_embeddings": N_CTX, "tie_word_embeddings": False}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=2))
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder
