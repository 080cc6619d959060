"""A llama target of a chosen shape with zero weights, and a random upstream DFlash draft for it.

For timing speculation on a large target without its weights (../shared/design/
docs/design/speculation-costs.md): the speed of a decode step depends on the shape, not on the
values. Writes into ``--out``:

* ``target.gguf``: arch ``llama`` (default: the 7.4 B shape — n_embd 4096, 32 layers, 32 / 8
  heads, FFN 14336 — 14.8 GB with SmolLM2's 49,152-token vocab), f16 matrices of zeros, f32
  norms of ones, and the tokenizer of ``--tokenizer-from`` (any GGUF: every ``tokenizer.*`` key is
  copied). An all-zero target's logits are all zero: greedy decoding repeats one token (b11434
  on CPU: "6" after any prompt). ``--random-embeddings`` fills ``token_embd`` and ``output`` with
  random values instead, so the target emits varied tokens (its layers still add nothing).
* ``draft.gguf``: a random 1-layer draft in the upstream ``dflash`` format of llama.cpp b11434
  (``dflash.block_size`` 16, ``dflash.target_layers``, ``tokenizer.ggml.mask_token_id``,
  tensors ``fc``, ``enc.output_norm``, ``output_norm`` and block 0's attention with q/k norms
  and FFN; no token embeddings or head: llama.cpp takes the target's). Heads and FFN width
  default to the target's (the 7.4 B shape's draft: 539 MB).

Zero tensors are written as holes (a sparse file: seconds, not 15 GB of writes; ``--dense``
writes the zeros). Random tensors are generated in chunks, so memory stays small.

Usage (from the repo root):
  python benchmarks/shaped_target.py --tokenizer-from SmolLM2.gguf --out DIR
      [--n-embd 4096 --n-layer 32 --n-head 32 --n-head-kv 8 --n-ff 14336]
      [--target-layers 2,16,30] [--mask-token-id N] [--random-embeddings] [--dense]
Prints one JSON line: the paths, sizes, parameter counts and draft settings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

BLOCK_SIZE = 16
RMS_EPS = 1e-5
SCALE = 0.02
"""Standard deviation of random weights."""
CHUNK_BYTES = 64 << 20
"""Most bytes of one tensor generated or written at a time."""
MASK_TOKEN = b"<empty_output>"
"""The v1 draft's mask token (SmolLM2 id 16), used as the default when the vocab has it."""


@dataclass(frozen=True)
class Shape:
    """A llama target's shape."""

    n_embd: int = 4096
    n_layer: int = 32
    n_head: int = 32
    n_head_kv: int = 8
    n_ff: int = 14336
    n_ctx: int = 8192
    rope_base: float = 500000.0

    def check(self) -> None:
        """Raise ValueError for a shape llama.cpp cannot load."""
        if min(self.n_embd, self.n_layer, self.n_head, self.n_head_kv, self.n_ff) < 1:
            raise ValueError("every size must be positive")
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")
        if self.n_head % self.n_head_kv:
            raise ValueError(f"n_head {self.n_head} is not a multiple of n_head_kv "
                             f"{self.n_head_kv}")
        if (self.n_embd // self.n_head) % 2:
            raise ValueError("the head size must be even (RoPE)")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


@dataclass(frozen=True)
class Tensor:
    """One tensor to write: ggml shape ``(ne0, ne1, …)``, numpy dtype, and how to fill it."""

    name: str
    shape: tuple[int, ...]
    dtype: type[np.floating[Any]]
    fill: str
    """``zero``, ``ones`` or ``random``."""

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def raw_field(field: gguf.ReaderField) -> tuple[Any, gguf.GGUFValueType,
                                                gguf.GGUFValueType | None]:
    """(value, type, array element type) of a reader field, strings as raw bytes (as
    ``train/export.py`` copies them: a token that is not valid UTF-8 stays as it is). Its own
    copy: ``train`` is a leaf nothing imports (tests/test_layering.py), and this script runs
    with numpy and gguf alone on a machine without the project's other dependencies."""
    vtype = gguf.GGUFValueType(field.types[0])
    if vtype == gguf.GGUFValueType.ARRAY:
        sub = gguf.GGUFValueType(field.types[-1])
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]) for i in field.data], vtype, sub
        return [field.parts[i].tolist()[0] for i in field.data], vtype, sub
    if vtype == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]), vtype, None
    return field.parts[field.data[0]].tolist()[0], vtype, None


def tokenizer_fields(path: Path) -> list[tuple[str, Any, gguf.GGUFValueType,
                                               gguf.GGUFValueType | None]]:
    """Every ``tokenizer.*`` key of the GGUF at ``path`` with its stored type."""
    reader = gguf.GGUFReader(path)
    fields = [(name, *raw_field(field)) for name, field in reader.fields.items()
              if name.startswith("tokenizer.")]
    if not any(name == "tokenizer.ggml.tokens" for name, *_ in fields):
        raise ValueError(f"{path} has no tokenizer (tokenizer.ggml.tokens)")
    return fields


def _tokens(fields: Sequence[tuple[str, Any, Any, Any]]) -> list[bytes]:
    return next(value for name, value, *_ in fields if name == "tokenizer.ggml.tokens")


def default_target_layers(n_layer: int, count: int = 3) -> list[int]:
    """Upstream ``dflash.target_layers`` (the *input* of each layer) spread like z-lab's
    default (HF layer outputs from 1 to n_layer − 3, evenly; upstream id = HF id + 1): the v1
    draft's ``[2, 15, 28]`` for SmolLM2's 30 layers, ``[2, 16, 30]`` for 32 layers."""
    hi = n_layer - 2
    if count == 1 or n_layer < 5:
        ids = [min(max(n_layer // 2, 0), hi)]
    else:
        span = n_layer - 4
        ids = [min(max(round(1 + i * span / (count - 1)) + 1, 0), hi) for i in range(count)]
    return sorted(set(ids))


def check_target_layers(layers: Sequence[int], n_layer: int) -> None:
    """Raise ValueError unless ``layers`` is non-empty, increasing and inside
    0..n_layer − 2 (the same rule as the project's tiny fixture, tests/dflash_fixture.py)."""
    if not layers or any(not 0 <= i <= n_layer - 2 for i in layers):
        raise ValueError(f"target layers {list(layers)} must be non-empty and inside "
                         f"0..{n_layer - 2} (below the target's last layer)")
    if list(layers) != sorted(set(layers)):
        raise ValueError(f"target layers {list(layers)} must be increasing, without repeats")


def target_tensors(shape: Shape, n_vocab: int, random_embeddings: bool) -> list[Tensor]:
    """The llama target's tensors in the fixture's order (ggml shapes)."""
    emb = "random" if random_embeddings else "zero"
    f16, f32 = np.float16, np.float32
    d, hd = shape.n_embd, shape.head_dim
    out = [Tensor("token_embd.weight", (d, n_vocab), f16, emb),
           Tensor("output_norm.weight", (d,), f32, "ones"),
           Tensor("output.weight", (d, n_vocab), f16, emb)]
    for i in range(shape.n_layer):
        out += [Tensor(f"blk.{i}.attn_norm.weight", (d,), f32, "ones"),
                Tensor(f"blk.{i}.attn_q.weight", (d, shape.n_head * hd), f16, "zero"),
                Tensor(f"blk.{i}.attn_k.weight", (d, shape.n_head_kv * hd), f16, "zero"),
                Tensor(f"blk.{i}.attn_v.weight", (d, shape.n_head_kv * hd), f16, "zero"),
                Tensor(f"blk.{i}.attn_output.weight", (shape.n_head * hd, d), f16, "zero"),
                Tensor(f"blk.{i}.ffn_norm.weight", (d,), f32, "ones"),
                Tensor(f"blk.{i}.ffn_gate.weight", (d, shape.n_ff), f16, "zero"),
                Tensor(f"blk.{i}.ffn_up.weight", (d, shape.n_ff), f16, "zero"),
                Tensor(f"blk.{i}.ffn_down.weight", (shape.n_ff, d), f16, "zero")]
    return out


def draft_tensors(draft: Shape, n_target_layers: int, fc_dtype: type[np.floating[Any]]
                  ) -> list[Tensor]:
    """The upstream ``dflash`` draft's tensors (one layer; ggml shapes)."""
    f16, f32 = np.float16, np.float32
    d, hd = draft.n_embd, draft.head_dim
    return [Tensor("fc.weight", (n_target_layers * d, d), fc_dtype, "random"),
            Tensor("enc.output_norm.weight", (d,), f32, "ones"),
            Tensor("output_norm.weight", (d,), f32, "ones"),
            Tensor("blk.0.attn_norm.weight", (d,), f32, "ones"),
            Tensor("blk.0.attn_q.weight", (d, draft.n_head * hd), f16, "random"),
            Tensor("blk.0.attn_k.weight", (d, draft.n_head_kv * hd), f16, "random"),
            Tensor("blk.0.attn_v.weight", (d, draft.n_head_kv * hd), f16, "random"),
            Tensor("blk.0.attn_output.weight", (draft.n_head * hd, d), f16, "random"),
            Tensor("blk.0.attn_q_norm.weight", (hd,), f32, "ones"),
            Tensor("blk.0.attn_k_norm.weight", (hd,), f32, "ones"),
            Tensor("blk.0.ffn_norm.weight", (d,), f32, "ones"),
            Tensor("blk.0.ffn_gate.weight", (d, draft.n_ff), f16, "random"),
            Tensor("blk.0.ffn_up.weight", (d, draft.n_ff), f16, "random"),
            Tensor("blk.0.ffn_down.weight", (draft.n_ff, d), f16, "random")]


def _u32(writer: gguf.GGUFWriter, key: str, value: int) -> None:
    writer.add_key_value(key, int(value), gguf.GGUFValueType.UINT32)


def _f32(writer: gguf.GGUFWriter, key: str, value: float) -> None:
    writer.add_key_value(key, float(value), gguf.GGUFValueType.FLOAT32)


def _write_data(fout: Any, tensor: Tensor, rng: np.random.Generator, dense: bool) -> None:
    """Append one tensor's data at ``fout``'s position, in chunks of whole rows."""
    if tensor.fill == "zero" and not dense:
        fout.seek(tensor.nbytes, os.SEEK_CUR)
        return
    row = tensor.shape[0]
    rows = tensor.nbytes // (row * np.dtype(tensor.dtype).itemsize)
    step = max(1, CHUNK_BYTES // (row * np.dtype(tensor.dtype).itemsize))
    for start in range(0, rows, step):
        n = min(step, rows - start)
        if tensor.fill == "random":
            chunk = (rng.standard_normal((n, row), dtype=np.float32) * SCALE).astype(tensor.dtype)
        elif tensor.fill == "ones":
            chunk = np.ones((n, row), dtype=tensor.dtype)
        else:
            chunk = np.zeros((n, row), dtype=tensor.dtype)
        fout.write(chunk.tobytes())


def write_gguf(path: Path, writer: gguf.GGUFWriter, tensors: Sequence[Tensor], seed: int,
               dense: bool = False) -> Path:
    """Write ``writer``'s keys and ``tensors`` (filled as each says) to ``path``, streaming the
    data: no tensor is held in memory whole."""
    for t in tensors:
        writer.add_tensor_info(t.name, tuple(reversed(t.shape)), np.dtype(t.dtype), t.nbytes)
    writer.write_header_to_file(path)
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    assert writer.fout is not None
    fout = writer.fout[0]
    align = writer.data_alignment
    rng = np.random.default_rng(seed)
    for t in tensors:
        pos = fout.tell()
        fout.write(b"\0" * (-pos % align))
        _write_data(fout, t, rng, dense)
    pos = fout.tell()
    fout.write(b"\0" * (-pos % align))
    fout.truncate()  # a file that ends in a hole gets its full size
    writer.close()
    return path


def write_target(path: Path, shape: Shape, tokenizer: Sequence[tuple[str, Any, Any, Any]],
                 *, random_embeddings: bool = False, seed: int = 0, dense: bool = False) -> Path:
    """Write the zero-weight llama target of ``shape`` with ``tokenizer``'s keys."""
    shape.check()
    n_vocab = len(_tokens(tokenizer))
    arch = "llama"
    writer = gguf.GGUFWriter(None, arch)
    writer.add_name(f"shaped-llama-{shape.n_embd}x{shape.n_layer}"
                    + ("-rand-embd" if random_embeddings else "-zero"))
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_F16))
    _u32(writer, f"{arch}.context_length", shape.n_ctx)
    _u32(writer, f"{arch}.embedding_length", shape.n_embd)
    _u32(writer, f"{arch}.block_count", shape.n_layer)
    _u32(writer, f"{arch}.feed_forward_length", shape.n_ff)
    _u32(writer, f"{arch}.attention.head_count", shape.n_head)
    _u32(writer, f"{arch}.attention.head_count_kv", shape.n_head_kv)
    _u32(writer, f"{arch}.rope.dimension_count", shape.head_dim)
    _u32(writer, f"{arch}.vocab_size", n_vocab)
    _f32(writer, f"{arch}.rope.freq_base", shape.rope_base)
    _f32(writer, f"{arch}.attention.layer_norm_rms_epsilon", RMS_EPS)
    for name, value, vtype, sub in tokenizer:
        writer.add_key_value(name, value, vtype, sub)
    return write_gguf(path, writer, target_tensors(shape, n_vocab, random_embeddings), seed,
                      dense)


def write_draft(path: Path, target: Shape, tokenizer: Sequence[tuple[str, Any, Any, Any]],
                target_layers: Sequence[int], *, mask_token_id: int | None = None,
                n_head: int | None = None, n_head_kv: int | None = None,
                n_ff: int | None = None, fc_dtype: type[np.floating[Any]] = np.float16,
                seed: int = 1) -> Path:
    """Write a random 1-layer upstream ``dflash`` draft for a target of shape ``target``."""
    check_target_layers(target_layers, target.n_layer)
    draft = Shape(n_embd=target.n_embd, n_layer=1, n_head=n_head or target.n_head,
                  n_head_kv=n_head_kv or target.n_head_kv, n_ff=n_ff or target.n_ff,
                  n_ctx=target.n_ctx, rope_base=target.rope_base)
    draft.check()
    tokens = _tokens(tokenizer)
    mask = default_mask_id(tokens) if mask_token_id is None else mask_token_id
    if not 0 <= mask < len(tokens):
        raise ValueError(f"mask token id {mask} is outside the vocab (0..{len(tokens) - 1})")
    arch = "dflash"
    writer = gguf.GGUFWriter(None, arch)
    writer.add_name(f"shaped-dflash-draft-{target.n_embd}x{target.n_layer}")
    _u32(writer, f"{arch}.context_length", draft.n_ctx)
    _u32(writer, f"{arch}.embedding_length", draft.n_embd)
    _u32(writer, f"{arch}.block_count", 1)
    _u32(writer, f"{arch}.feed_forward_length", draft.n_ff)
    _u32(writer, f"{arch}.attention.head_count", draft.n_head)
    _u32(writer, f"{arch}.attention.head_count_kv", draft.n_head_kv)
    _f32(writer, f"{arch}.attention.layer_norm_rms_epsilon", RMS_EPS)
    _f32(writer, f"{arch}.rope.freq_base", draft.rope_base)
    _u32(writer, f"{arch}.block_size", BLOCK_SIZE)
    writer.add_key_value(f"{arch}.target_layers", [int(i) for i in target_layers],
                         gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32)
    for name, value, vtype, sub in tokenizer:
        if name != "tokenizer.ggml.mask_token_id":
            writer.add_key_value(name, value, vtype, sub)
    _u32(writer, "tokenizer.ggml.mask_token_id", mask)
    return write_gguf(path, writer, draft_tensors(draft, len(target_layers), fc_dtype), seed,
                      dense=True)


def default_mask_id(tokens: Sequence[bytes]) -> int:
    """``<empty_output>`` when the vocab has it (SmolLM2: 16, as the v1 draft), else the last
    id: any id works for random weights."""
    try:
        return list(tokens).index(MASK_TOKEN)
    except ValueError:
        return len(tokens) - 1


def _parse_layers(spec: str) -> list[int]:
    try:
        return [int(x) for x in spec.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of ints: {spec}") from exc


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer-from", type=Path, required=True,
                        help="a GGUF whose tokenizer.* keys are copied (e.g. SmolLM2's)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the two files")
    defaults = Shape()
    parser.add_argument("--n-embd", type=int, default=defaults.n_embd)
    parser.add_argument("--n-layer", type=int, default=defaults.n_layer)
    parser.add_argument("--n-head", type=int, default=defaults.n_head)
    parser.add_argument("--n-head-kv", type=int, default=defaults.n_head_kv)
    parser.add_argument("--n-ff", type=int, default=defaults.n_ff)
    parser.add_argument("--n-ctx", type=int, default=defaults.n_ctx,
                        help="context_length key of both files")
    parser.add_argument("--rope-base", type=float, default=defaults.rope_base)
    parser.add_argument("--target-layers", type=_parse_layers, default=None,
                        help="upstream dflash.target_layers (default: 3 spread like z-lab's)")
    parser.add_argument("--mask-token-id", type=int, default=None)
    parser.add_argument("--draft-n-ff", type=int, default=None, help="default: the target's")
    parser.add_argument("--draft-n-head", type=int, default=None)
    parser.add_argument("--draft-n-head-kv", type=int, default=None)
    parser.add_argument("--fc-f32", action="store_true",
                        help="store the draft's fc in f32 (as a trained draft must); default f16")
    parser.add_argument("--random-embeddings", action="store_true",
                        help="random token_embd and output instead of zeros (varied tokens)")
    parser.add_argument("--dense", action="store_true", help="write zeros instead of holes")
    parser.add_argument("--no-draft", action="store_true")
    parser.add_argument("--no-target", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    shape = Shape(n_embd=args.n_embd, n_layer=args.n_layer, n_head=args.n_head,
                  n_head_kv=args.n_head_kv, n_ff=args.n_ff, n_ctx=args.n_ctx,
                  rope_base=args.rope_base)
    layers = args.target_layers or default_target_layers(shape.n_layer)
    try:
        shape.check()
        check_target_layers(layers, shape.n_layer)
        tokenizer = tokenizer_fields(args.tokenizer_from)
    except (OSError, ValueError) as exc:
        print(f"shaped_target: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"shape": vars(shape) | {"n_vocab": len(_tokens(tokenizer))},
                              "target_layers": layers}
    if not args.no_target:
        target = write_target(args.out / "target.gguf", shape, tokenizer,
                              random_embeddings=args.random_embeddings, seed=args.seed,
                              dense=args.dense)
        n_vocab = len(_tokens(tokenizer))
        report["target"] = {"path": str(target), "bytes": target.stat().st_size,
                            "params": sum(int(np.prod(t.shape)) for t in
                                          target_tensors(shape, n_vocab, False)),
                            "random_embeddings": args.random_embeddings}
    if not args.no_draft:
        draft = write_draft(args.out / "draft.gguf", shape, tokenizer, layers,
                            mask_token_id=args.mask_token_id, n_head=args.draft_n_head,
                            n_head_kv=args.draft_n_head_kv, n_ff=args.draft_n_ff,
                            fc_dtype=np.float32 if args.fc_f32 else np.float16,
                            seed=args.seed + 1)
        report["draft"] = {"path": str(draft), "bytes": draft.stat().st_size,
                           "mask_token_id": (default_mask_id(_tokens(tokenizer))
                                             if args.mask_token_id is None
                                             else args.mask_token_id)}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
