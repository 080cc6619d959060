"""What a launch needs in memory, part by part: weights, KV cache, context checkpoints, the
draft, compute buffers (pure arithmetic on the GGUF header).

Estimates follow llama.cpp b11434's allocation (``src/llama-kv-cache.cpp``,
``src/llama-kv-cache-iswa.cpp``, ``src/llama-context.cpp``, ``common/speculative.cpp``):

- weights: the sum of the GGUF's tensor sizes (:mod:`backend.models.ggufinfo`);
- KV cache: per layer that owns one, ``cells x (row(K) + row(V))`` with rows priced by the cache
  type's ggml block size (``gguf.GGML_QUANT_SIZES``); BeeLlama ≤0.3's TurboQuant types
  (``turbo2/3/4``, ``turbo2_tcq``, ``turbo3_tcq``: :data:`TURBO_BLOCK_BYTES`) pad each head to a
  multiple of 128 values and price 128-value blocks, fall back to f16 for heads over 512, and
  must live on the GPU (v0.3.1 ``src/llama-kv-cache.cpp`` refuses a KV layer in host memory, so
  a CPU plan with them is refused here first). With flash attention on or auto, any quantized
  type must divide the head size (:func:`head_blocker`): turbo types need heads of 128, 256…
  (SmolLM2's 64 are refused by the real binary, measured). The context is padded to 256 cells
  and, when the slots do not share one buffer (no ``--kv-unified``), split into per-slot streams of
  ``pad(ctx / slots, 256)``. Sliding-window layers hold ``pad(min(ctx_seq, window x (slots if
  unified else 1) + ubatch), 256)`` cells unless ``--swa-full`` sizes them like the rest. Without
  flash attention V rows are as wide as the widest layer's;
- context checkpoints (host RAM): taken only on sliding-window models without ``--swa-full``;
  each holds one slot's sliding-window cache, up to ``ctx_checkpoints`` (default 32) per slot;
- the draft model (``--spec-draft-model``): its weights, and a KV cache sized like the target's
  context (``common_base_params_to_speculative`` copies ``n_ctx``, slots and ``--kv-unified``)
  with the draft cache types, which stay f16;
- compute buffers: ``4 B x ubatch x (3 ff + 4 embd + 3 heads x head_dim)`` plus the output
  logits; on a GPU a fixed :data:`GPU_RUNTIME_MIB` for the CUDA context and libraries. These two
  are rough (the SmolLM2 compute buffer comes out 8 % high); weights and KV are exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.models.ggufinfo import GgufInfo

MIB = 2**20
DEFAULT_UBATCH = 512
DEFAULT_CHECKPOINTS = 32
"""b11434 ``--ctx-checkpoints`` default (``common/common.h``)."""

DRAFT_OUTPUTS = 16
"""Outputs per step of a DFlash draft: the anchor plus 15 masked positions."""

CTX_PAD = 256
TURBO_BLOCK = 128
"""Values per TurboQuant block, and the head size each head is padded to (the Walsh-Hadamard
rotation works on 128 values: BeeLlama v0.3.1 ``ggml/src/ggml-common.h``, ``QK_TURBO*``)."""

TURBO_BLOCK_BYTES = {"turbo2": 34, "turbo3": 50, "turbo4": 66, "turbo2_tcq": 36,
                     "turbo3_tcq": 52}
"""Bytes per 128-value block of each TurboQuant KV type (``sizeof(block_turbo*)`` there: an f16
norm plus the packed indices)."""

TURBO_MAX_HEAD = 512
"""Heads wider than this keep an f16 cache (the turbo flash-attention kernel's limit)."""


def row_bytes(cache_type: str, n: int) -> int:
    """Bytes of ``n`` elements of ggml type ``cache_type`` (``f16``, ``q8_0``, ``q4_1``…).

    Raises ``ValueError`` for an unknown type or ``n`` not a multiple of the type's block size.
    """
    import gguf  # deferred: gguf and numpy cost ~0.25 s of every command's startup

    try:
        qtype = gguf.GGMLQuantizationType[cache_type.upper()]
    except KeyError as exc:
        raise ValueError(f"unknown KV cache type '{cache_type}'") from exc
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    if n % block:
        raise ValueError(f"{n} elements are not a multiple of {cache_type}'s block of {block}")
    return n // block * size


def is_turbo(cache_type: str) -> bool:
    """Whether ``cache_type`` is one of BeeLlama ≤0.3's TurboQuant KV types."""
    return cache_type in TURBO_BLOCK_BYTES


def kv_row_bytes(cache_type: str, heads: int, head_dim: int) -> int:
    """Bytes of one token's K (or V) row of a layer with ``heads`` heads of ``head_dim``.

    Standard types: :func:`row_bytes` of ``heads x head_dim``. TurboQuant: each head padded to a
    multiple of 128, in 128-value blocks; heads over 512 fall back to f16 (module docstring).
    """
    if not is_turbo(cache_type):
        return row_bytes(cache_type, heads * head_dim)
    if head_dim > TURBO_MAX_HEAD:
        return row_bytes("f16", heads * head_dim)
    blocks = -(-head_dim // TURBO_BLOCK)
    return heads * blocks * TURBO_BLOCK_BYTES[cache_type]


def block_size(cache_type: str) -> int:
    """Values per block of a KV cache type (1 for f16/f32/bf16)."""
    if is_turbo(cache_type):
        return TURBO_BLOCK
    import gguf  # deferred: startup time

    try:
        return gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[cache_type.upper()]][0]
    except KeyError as exc:
        raise ValueError(f"unknown KV cache type '{cache_type}'") from exc


def head_blocker(info: GgufInfo, type_k: str, type_v: str,
                 flash_attn: str | None) -> str | None:
    """Why llama.cpp refuses these cache types for this model, or None.

    With flash attention on or auto (anything but ``off``) a quantized K or V type must divide
    every layer's head size (``llama_init_from_model`` in BeeLlama v0.3.1 and upstream:
    "K cache type turbo4 with block size 128 does not divide n_embd_head_k=64"); with it off,
    BeeLlama turns it back on for TurboQuant and pads each head to 128 instead.
    """
    if flash_attn == "off":
        return None
    for which, cache_type in (("K", type_k), ("V", type_v)):
        block = block_size(cache_type)
        heads = {(info.head_dim_k_swa if info.is_swa(il) else info.head_dim_k) if which == "K"
                 else (info.head_dim_v_swa if info.is_swa(il) else info.head_dim_v)
                 for il in range(info.n_kv_layers)}
        bad = sorted(h for h in heads if h % block)
        if bad:
            fix = (' or set flash_attn = "off" (BeeLlama then pads each head to 128 values and '
                   "turns flash attention back on)" if is_turbo(cache_type) else "")
            return (f"the {which} cache type {cache_type} stores blocks of {block} values, which "
                    f"do not divide this model's {which} head size "
                    f"({', '.join(map(str, bad))}) with flash attention on; choose another "
                    f"type{fix}")
    return None


def _pad(n: int, to: int = CTX_PAD) -> int:
    return (n + to - 1) // to * to


@dataclass(frozen=True)
class KvShape:
    """How llama.cpp lays out a context's KV cache."""

    ctx: int
    slots: int = 1
    unified: bool = False
    swa_full: bool = False
    ubatch: int = DEFAULT_UBATCH
    flash_attn: bool = True
    type_k: str = "f16"
    type_v: str = "f16"

    @property
    def streams(self) -> int:
        return 1 if self.unified else self.slots

    @property
    def cells_full(self) -> int:
        """Cells per stream of a full-attention layer."""
        total = _pad(self.ctx)
        return total if self.unified else _pad(max(1, total // self.slots))

    def cells_swa(self, n_swa: int) -> int:
        """Cells per stream of a sliding-window layer."""
        if self.swa_full:
            return self.cells_full
        window = n_swa * (self.slots if self.unified else 1) + self.ubatch
        return _pad(min(self.cells_full, window))


def _head_dims(info: GgufInfo, il: int) -> tuple[int, int]:
    swa = info.is_swa(il)
    return (info.head_dim_k_swa if swa else info.head_dim_k,
            info.head_dim_v_swa if swa else info.head_dim_v)


def _cell_bytes(info: GgufInfo, il: int, shape: KvShape, v_max: int) -> int:
    """Bytes per cell of layer ``il``'s K and V (TurboQuant implies flash attention)."""
    heads = info.n_head_kv[il]
    k_dim, v_dim = _head_dims(info, il)
    if shape.flash_attn or is_turbo(shape.type_v):
        v_row = kv_row_bytes(shape.type_v, heads, v_dim)
    else:
        v_row = row_bytes(shape.type_v, v_max)
    return kv_row_bytes(shape.type_k, heads, k_dim) + v_row


def kv_bytes(info: GgufInfo, shape: KvShape) -> tuple[int, int]:
    """(full-attention bytes, sliding-window bytes) of ``info``'s KV cache for ``shape``."""
    v_max = max((info.kv_width(il)[1] for il in range(info.n_kv_layers)), default=0)
    full = swa = 0
    for il in range(info.n_kv_layers):
        per_cell = _cell_bytes(info, il, shape, v_max)
        if info.is_swa(il):
            swa += shape.streams * shape.cells_swa(info.n_swa) * per_cell
        else:
            full += shape.streams * shape.cells_full * per_cell
    return full, swa


def checkpoint_bytes(info: GgufInfo, shape: KvShape, per_slot: int) -> int:
    """Host RAM for ``per_slot`` context checkpoints of every slot: each saves one slot's
    sliding-window cache. Zero when the model has no sliding window or ``swa_full`` is set."""
    if info.n_swa == 0 or shape.swa_full or per_slot <= 0:
        return 0
    one_slot = KvShape(ctx=shape.ctx, slots=1, unified=True, ubatch=shape.ubatch,
                       flash_attn=shape.flash_attn, type_k=shape.type_k, type_v=shape.type_v)
    cells = min(one_slot.cells_swa(info.n_swa), shape.cells_full)
    layer_bytes = sum(kv_row_bytes(shape.type_k, info.n_head_kv[il], _head_dims(info, il)[0])
                      + kv_row_bytes(shape.type_v, info.n_head_kv[il], _head_dims(info, il)[1])
                      for il in range(info.n_kv_layers) if info.is_swa(il))
    return per_slot * shape.slots * cells * layer_bytes


def compute_bytes(info: GgufInfo, shape: KvShape, outputs: int, n_vocab: int) -> int:
    """Rough compute-buffer size: the widest per-ubatch activations plus the output logits;
    without flash attention also the KQ matrix over the context."""
    acts = 4 * shape.ubatch * (3 * info.n_ff + 4 * info.n_embd
                               + 3 * info.n_head * max(info.head_dim_k, info.head_dim_k_swa))
    if not shape.flash_attn:
        acts += 4 * shape.ubatch * shape.cells_full * info.n_head
    return acts + 4 * outputs * n_vocab
