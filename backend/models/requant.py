"""A target model's weights rewritten once to another GGUF type (a preset's ``requantize``).

Why: llama.cpp b11434's CPU backend has no multi-row kernel for Q4_1 (llamafile's sgemm and the
repack path take Q4_0/Q8_0/K-quants, not Q4_1; the x86 Q4_1 dot product handles one row), so
verifying K drafted tokens with a Q4_1 target costs nearly K decode steps, and DFlash cannot pay
on the CPU. The same SmolLM2 weights as Q8_0 go through tinyBLAS's matrix kernels, where
drafting pays at a plain decoding speed about Q4_1's (docs/performance.md, "Speculation: the
tuned `dflash` profile"; benchmarks/RESULTS.md, section "Why DFlash loses on this CPU: the
target's weight type").

Q8_0 holds every value of a 4- or 5-bit block to within 8-bit rounding of its block's largest
value, so the model computes nearly the same logits (not bit-identical ones: greedy text can
differ in rare near-ties). Float tensors (norms, F16/F32 weights) and tensors already in the
target type are copied as they are; every metadata key is kept, except ``general.file_type``,
which is set to the new type. Tensors are converted one at a time (memory: one tensor in f32).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from filelock import FileLock

from backend.home import home
from backend.models.sources import ModelError, version_key

if TYPE_CHECKING:
    import gguf

Requantize = Literal["q8_0"]
"""The types a preset may ask for: Q8_0 only (it keeps lower-bit types' values; rewriting to a
type with fewer bits would change the model)."""

_FILE_TYPES = {"q8_0": 7}
"""``general.file_type`` (llama.cpp's ``LLAMA_FTYPE_MOSTLY_Q8_0``) per requantize type."""


def requantized_path(model: Path, to: Requantize) -> Path:
    """Where the ``to`` rewrite of ``model`` is (or will be) kept: ``<cache>/models/requantized/``,
    keyed by the source's resolved path, size and modification time (a replaced file is
    rewritten again)."""
    return home().models / "requantized" / f"{model.stem}-{version_key(model)}.{to}.gguf"


def _rewritten(tensor: gguf.ReaderTensor, target: gguf.GGMLQuantizationType) -> bool:
    """True for a quantized tensor of another type: floats and integers (one value a block)
    and ``target`` stay as they are."""
    import gguf  # deferred: numpy and gguf cost ~0.25 s at import

    block, _ = gguf.GGML_QUANT_SIZES[tensor.tensor_type]
    return block > 1 and tensor.tensor_type != target


def requantize_file(src: Path, dst: Path, to: Requantize) -> dict[str, object]:
    """Write ``src`` with every quantized tensor of another type rewritten to ``to`` into ``dst``
    (through ``dst.part``, renamed when complete); returns a summary: ``rewritten`` (tensor
    count), ``from_types`` (type names seen), ``tensors``, ``bytes`` (of ``dst``).

    Raises :class:`ModelError` when ``src`` is not a readable GGUF or holds a tensor type
    gguf-py cannot dequantize, or ``dst`` cannot be written."""
    import gguf  # deferred: startup time
    import numpy as np

    target = gguf.GGMLQuantizationType[to.upper()]
    try:
        reader = gguf.GGUFReader(src)
    # gguf's parser fails on broken bytes in many ways (ValueError, struct, numpy, IndexError).
    except Exception as exc:  # noqa: BLE001
        raise ModelError(f"{src} is not a readable GGUF file: {exc or type(exc).__name__}",
                         plain=True) from exc
    arch_field = reader.fields.get(gguf.Keys.General.ARCHITECTURE)
    if arch_field is None:
        raise ModelError(f"{src} has no general.architecture; it is not a model GGUF", plain=True)
    # Every quantized type's block is a multiple of Q8_0's 32 values, so its rows fit Q8_0's.
    plan = [(t, _rewritten(t, target), tuple(int(x) for x in reversed(t.shape.tolist())))
            for t in reader.tensors]  # shape in numpy order: rows last
    from_types = sorted({t.tensor_type.name for t, change, _ in plan if change})
    tmp = dst.with_name(dst.name + ".part")
    writer = None
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        writer = gguf.GGUFWriter(tmp, str(arch_field.contents()))
        for field in reader.fields.values():
            if field.name.startswith("GGUF.") or field.name == gguf.Keys.General.ARCHITECTURE:
                continue
            if field.name == gguf.Keys.General.FILE_TYPE:
                writer.add_key_value(field.name, _FILE_TYPES[to], gguf.GGUFValueType.UINT32)
                continue
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
        for t, change, shape in plan:
            if change:
                byte_shape = gguf.quant_shape_to_byte_shape(shape, target)
                writer.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8),
                                       int(np.prod(byte_shape)), target)
            else:
                writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes,
                                       t.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t, change, shape in plan:
            data = t.data
            if change:
                try:
                    weights = gguf.dequantize(t.data, t.tensor_type).reshape(shape)
                except NotImplementedError as exc:
                    raise ModelError(f"{src}: tensor {t.name} is {t.tensor_type.name}, which "
                                     "gguf-py cannot dequantize; remove `requantize` from the "
                                     "preset", plain=True) from exc
                data = gguf.quantize(weights.astype(np.float32), target)
            writer.write_tensor_data(data, tensor_endianess=reader.endianess)
        writer.close()
        writer = None
        os.replace(tmp, dst)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            if writer is not None:
                writer.close()
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise ModelError(f"cannot write {dst}: {exc.strerror or exc}") from exc
        raise
    return {"rewritten": sum(change for _, change, _ in plan), "from_types": from_types,
            "tensors": len(plan), "bytes": dst.stat().st_size}


def requantized(model: Path, to: Requantize | None,
                note: Callable[[str], None] | None = None) -> Path:
    """The file to serve for a preset's target ``model``: ``model`` itself when ``to`` is None,
    else its ``to`` rewrite, made once into the model cache (locked, so two launches do not
    write it twice) and re-used after.

    Raises :class:`ModelError` (see :func:`requantize_file`), also when the disk lacks room for
    the rewrite (about ``model``'s size times the ratio of bits)."""
    if to is None:
        return model
    dst = requantized_path(model, to)
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(f"cannot write {dst.parent}: {exc.strerror or exc}") from exc
    with FileLock(str(dst.with_name(dst.name + ".lock"))):
        if dst.is_file():
            return dst
        # Q8_0 costs 8.5 bits a weight, a 4-bit source about 4.5-5: twice its size is enough.
        free = shutil.disk_usage(dst.parent).free
        if free < 2 * model.stat().st_size:
            raise ModelError(f"rewriting {model.name} to {to.upper()} needs about "
                             f"{2 * model.stat().st_size / 2**20:.0f} MiB in {dst.parent}, and "
                             f"{free / 2**20:.0f} MiB are free", plain=True)
        if note:
            note(f"rewriting {model.name}'s weights to {to.upper()} once (the preset's "
                 f"`requantize`): {dst}")
        summary = requantize_file(model, dst, to)
        if note:
            types = ", ".join(summary["from_types"]) or "none"  # type: ignore[arg-type]
            note(f"{summary['rewritten']} of {summary['tensors']} tensors rewritten "
                 f"(from {types}), {int(summary['bytes']) / 2**20:.0f} MiB")  # type: ignore
        return dst
