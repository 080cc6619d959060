"""Export a trained draft to llama.cpp b11434's upstream ``dflash`` GGUF, with numpy and gguf
only (no torch), so it runs and is tested anywhere.

Input: a draft weights file (``.npz``; :func:`save_weights` writes it): every tensor under its
GGUF name in numpy layout (matrices ``(ne1, ne0)`` = torch's ``(out, in)``), plus the
:class:`~train.config.DraftConfig` as JSON under ``__config__``.

Output (shared/dflash/README.md; b11434 ``conversion/qwen.py``, ``gguf-py/.../tensor_mapping.py``):
arch ``dflash``; ``dflash.block_size`` and the generic shape keys (u32); ``dflash.target_layers``
(i32 array, upstream ids); ``tokenizer.ggml.mask_token_id`` (u32) and every other
``tokenizer.*`` key of the target, types kept; tensors ``fc`` **f32** (target features reach
2.5e4: an f16 ``fc`` makes ggml convert the activations to f16), the other matrices f16, norms
f32. No token embeddings or output head: llama.cpp takes the target's.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import gguf
import numpy as np

from train.config import DraftConfig
from train.errors import InputError

ARCH = "dflash"
CONFIG_KEY = "__config__"
MASK_KEY = "tokenizer.ggml.mask_token_id"


def save_weights(weights: dict[str, np.ndarray], config: DraftConfig, path: Path) -> Path:
    """Write ``weights`` (GGUF names → arrays, float32) and ``config`` to ``path`` (npz)."""
    _check_shapes(weights, config, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        np.savez(fh, **{k: np.asarray(v, dtype=np.float32) for k, v in weights.items()},
                 **{CONFIG_KEY: np.asarray(config.to_json())})
    os.replace(tmp, path)
    return path


def load_weights(path: Path) -> tuple[dict[str, np.ndarray], DraftConfig]:
    """Read a draft weights file; :class:`InputError` when it is missing, not an npz, has no
    config, or a tensor is missing or has the wrong shape."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such draft weights file")
    try:
        with np.load(path, allow_pickle=False) as z:
            if CONFIG_KEY not in z.files:
                raise InputError(f"{path}: not a draft weights file (no {CONFIG_KEY})")
            config = DraftConfig.from_json(str(z[CONFIG_KEY]))
            weights = {k: z[k] for k in z.files if k != CONFIG_KEY}
    except InputError:
        raise
    except (OSError, ValueError, TypeError, KeyError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"{path}: not a readable draft weights file ({exc})") from exc
    _check_shapes(weights, config, path)
    return weights, config


def _check_shapes(weights: dict[str, np.ndarray], config: DraftConfig, where: Path) -> None:
    want = config.tensor_shapes()
    missing = sorted(set(want) - set(weights))
    if missing:
        raise InputError(f"{where}: draft tensors missing: {', '.join(missing[:4])}"
                         + (f" and {len(missing) - 4} more" if len(missing) > 4 else ""))
    for name, shape in want.items():
        if tuple(weights[name].shape) != shape:
            raise InputError(f"{where}: {name} has shape {tuple(weights[name].shape)}, the "
                             f"config needs {shape}")


def raw_field(field: gguf.ReaderField) -> tuple[object, gguf.GGUFValueType,
                                                  gguf.GGUFValueType | None]:
    """(value, type, array element type) of a reader field, strings as raw bytes (a token
    that is not valid UTF-8 is copied as it is)."""
    vtype = gguf.GGUFValueType(field.types[0])
    if vtype == gguf.GGUFValueType.ARRAY:
        sub = gguf.GGUFValueType(field.types[-1])
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]) for i in field.data], vtype, sub
        return [field.parts[i].tolist()[0] for i in field.data], vtype, sub
    if vtype == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]), vtype, None
    return field.parts[field.data[0]].tolist()[0], vtype, None


def _tokenizer(target: Path) -> list[tuple[str, object, gguf.GGUFValueType,
                                           gguf.GGUFValueType | None]]:
    try:
        reader = gguf.GGUFReader(target)
    except (OSError, ValueError) as exc:
        raise InputError(f"{target}: not a readable GGUF ({exc})") from exc
    keys = [(name, *raw_field(f)) for name, f in reader.fields.items()
            if name.startswith("tokenizer.") and name != MASK_KEY]
    if not any(name == "tokenizer.ggml.tokens" for name, *_ in keys):
        raise InputError(f"{target}: the target has no tokenizer (tokenizer.ggml.tokens)")
    return keys


def export_gguf(weights: dict[str, np.ndarray], config: DraftConfig, target: Path, out: Path,
                name: str = "dflash-draft") -> Path:
    """Write the upstream ``dflash`` GGUF for ``weights`` to ``out``, with ``target``'s
    tokenizer; returns ``out``. Raises :class:`InputError` for missing or misshapen tensors or
    a target without a tokenizer."""
    _check_shapes(weights, config, out)
    tokenizer = _tokenizer(Path(target))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    writer = gguf.GGUFWriter(tmp, ARCH)
    writer.add_name(name)
    u32, f32 = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32
    for key, value in (("context_length", config.context_length),
                       ("embedding_length", config.n_embd), ("block_count", config.n_layer),
                       ("feed_forward_length", config.n_ff),
                       ("attention.head_count", config.n_head),
                       ("attention.head_count_kv", config.n_head_kv),
                       ("rope.dimension_count", config.head_dim),
                       ("attention.key_length", config.head_dim),
                       ("attention.value_length", config.head_dim),
                       ("block_size", config.block_size)):
        writer.add_key_value(f"{ARCH}.{key}", int(value), u32)
    writer.add_key_value(f"{ARCH}.attention.layer_norm_rms_epsilon", float(config.eps), f32)
    writer.add_key_value(f"{ARCH}.rope.freq_base", float(config.rope_base), f32)
    writer.add_key_value(f"{ARCH}.target_layers", [int(i) for i in config.target_layers],
                         gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32)
    for key, value, vtype, sub in tokenizer:
        writer.add_key_value(key, value, vtype, sub)
    writer.add_key_value(MASK_KEY, int(config.mask_id), u32)
    for tensor, shape in config.tensor_shapes().items():
        array = np.ascontiguousarray(weights[tensor], dtype=np.float32)
        if len(shape) == 2 and tensor != "fc.weight":
            array = array.astype(np.float16)
        writer.add_tensor(tensor, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, out)
    return out


def weights_from_gguf(path: Path) -> tuple[dict[str, np.ndarray], dict[str, object]]:
    """A ``dflash`` draft GGUF's tensors (float32, numpy layout) and its ``dflash.*`` keys:
    to compare an export with a reference, or to start training from an existing draft."""
    reader = gguf.GGUFReader(Path(path))
    weights = {}
    for t in reader.tensors:
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        weights[t.name] = np.asarray(t.data, dtype=np.float32).reshape(shape)
    keys = {name: f.contents() for name, f in reader.fields.items()
            if name.startswith(ARCH + ".") or name == MASK_KEY}
    return weights, keys
