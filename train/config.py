"""The draft's shape, read from the target GGUF's header (no torch).

The draft mirrors llama.cpp b11434's ``dflash`` graph (shared/dflash/README.md): width, heads,
head size, feed-forward width and norm epsilon are the target's, so the target's token
embeddings and output head serve it unchanged; ``target_layers`` are upstream ids (the *input*
of that target layer = HF ``hidden_states[id]`` = z-lab's id + 1).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from backend.models.ggufinfo import GgufError, gguf_metadata, read_gguf_info
from train.errors import InputError

SUPPORTED_ARCHS = ("llama",)
"""Targets whose transformers loader and llama.cpp graph the trainer has been checked on."""
BLOCK_SIZE = 16
MASK_TOKEN_ID = 16
"""SmolLM2's ``<empty_output>``: never generated, so it is free to mark block positions."""
ROPE_BASE = 100_000.0


@dataclass(frozen=True)
class DraftConfig:
    """Everything that fixes the draft's tensors and how llama.cpp runs it."""

    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_layer: int
    eps: float
    n_vocab: int
    target_layers: tuple[int, ...]
    """Upstream ids: the input of that target layer (0 = the token embeddings)."""
    block_size: int = BLOCK_SIZE
    mask_id: int = MASK_TOKEN_ID
    rope_base: float = ROPE_BASE
    context_length: int = 8192

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DraftConfig:
        data = json.loads(text)
        data["target_layers"] = tuple(data["target_layers"])
        return cls(**data)

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every GGUF tensor name → numpy shape (``(ne1, ne0)`` for matrices)."""
        d, hd = self.n_embd, self.head_dim
        shapes: dict[str, tuple[int, ...]] = {
            "fc.weight": (d, len(self.target_layers) * d),
            "enc.output_norm.weight": (d,),
            "output_norm.weight": (d,),
        }
        for i in range(self.n_layer):
            b = f"blk.{i}."
            shapes |= {
                b + "attn_norm.weight": (d,), b + "attn_q.weight": (self.n_head * hd, d),
                b + "attn_k.weight": (self.n_head_kv * hd, d),
                b + "attn_v.weight": (self.n_head_kv * hd, d),
                b + "attn_output.weight": (d, self.n_head * hd),
                b + "attn_q_norm.weight": (hd,), b + "attn_k_norm.weight": (hd,),
                b + "ffn_norm.weight": (d,), b + "ffn_gate.weight": (self.n_ff, d),
                b + "ffn_up.weight": (self.n_ff, d), b + "ffn_down.weight": (d, self.n_ff),
            }
        return shapes


def target_architecture(target: Path) -> str:
    """The target GGUF's ``general.architecture``; :class:`InputError` when the file is
    missing, not a GGUF, or not an architecture the trainer supports."""
    try:
        info = read_gguf_info(Path(target))
    except GgufError as exc:
        raise InputError(f"target: {exc}") from exc
    if info.architecture not in SUPPORTED_ARCHS:
        raise InputError(f"{target}: the target's architecture is '{info.architecture}'; the "
                         f"trainer supports {', '.join(SUPPORTED_ARCHS)} targets")
    return info.architecture


def draft_config(target: Path, *, n_layer: int = 1, target_layers: tuple[int, ...] | None = None,
                 block_size: int = BLOCK_SIZE, mask_id: int = MASK_TOKEN_ID,
                 rope_base: float | None = None) -> DraftConfig:
    """The draft for ``target``: its width, heads, FFN and RoPE base (``rope_base`` overrides
    it); ``target_layers`` default to z-lab's three-layer spread (the inputs of layer 2, the
    middle one and the last but one: upstream ids).

    Raises :class:`InputError` for a missing or unsupported target, target layers outside
    ``0..n_layer - 1`` of the target, or a mask id outside its vocabulary.
    """
    arch = target_architecture(target)
    info = read_gguf_info(Path(target))
    meta = gguf_metadata(Path(target))
    n = info.n_layer
    layers = tuple(target_layers) if target_layers else (2, n // 2, n - 2)
    if not layers or any(not 0 <= i < n for i in layers):
        raise InputError(f"target layers {list(layers)} must be inside 0..{n - 1} (the target "
                         f"has {n} layers; ids are layer inputs)")
    if not 0 <= mask_id < info.n_vocab:
        raise InputError(f"mask token id {mask_id} is outside the vocabulary "
                         f"(0..{info.n_vocab - 1})")
    if n_layer < 1:
        raise InputError("the draft needs at least one layer")
    eps = float(meta.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5))
    return DraftConfig(n_embd=info.n_embd, n_head=info.n_head, n_head_kv=max(info.n_head_kv),
                       head_dim=info.head_dim_k, n_ff=info.n_ff, n_layer=n_layer, eps=eps,
                       n_vocab=info.n_vocab, target_layers=layers, block_size=block_size,
                       mask_id=mask_id,
                       rope_base=float(rope_base or meta.get(f"{arch}.rope.freq_base", ROPE_BASE)),
                       context_length=int(info.context_length or 8192))
