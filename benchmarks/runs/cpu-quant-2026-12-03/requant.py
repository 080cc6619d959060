"""Rewrite a GGUF's Q4_1 tensors as Q4_0 or Q8_0 (gguf-py, numpy): the experiment behind
``benchmarks/RESULTS.md``, "Why DFlash loses on this CPU: the target's weight type".

Usage: ``python requant.py SRC.gguf DST.gguf Q4_0|Q8_0``. Every Q4_1 tensor is dequantised
and quantised again to the new type; other tensors and every metadata field are copied as they
are (``general.file_type`` still says Q4_1: llama.cpp reads each tensor's own type). Q8_0 keeps
Q4_1's values to within 8-bit rounding; Q4_0 (no per-block offset) changes them, and so the
model's greedy text. Not a product feature: an experiment, kept as it ran.
"""

from __future__ import annotations

import sys

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from gguf import GGUFValueType as V


def _value(field: gguf.ReaderField) -> object:
    kind = field.types[0]
    if kind == V.ARRAY:
        if field.types[-1] == V.STRING:
            return [bytes(field.parts[i]) for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    if kind == V.STRING:
        return bytes(field.parts[field.data[0]])
    return field.parts[field.data[0]].tolist()[0]


def requantize(src: str, dst: str, target: Q) -> None:
    reader = gguf.GGUFReader(src)
    arch = _value(reader.fields["general.architecture"])
    writer = gguf.GGUFWriter(dst, arch=arch.decode())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        sub = field.types[-1] if field.types[0] == V.ARRAY else None
        writer.add_key_value(key, _value(field), field.types[0], sub_type=sub)
    for t in reader.tensors:
        if t.tensor_type == Q.Q4_1:
            shape = [int(x) for x in reversed(t.shape.tolist())]
            weights = gguf.dequantize(t.data, t.tensor_type).reshape(shape).astype(np.float32)
            writer.add_tensor(t.name, gguf.quantize(weights, target), raw_dtype=target)
        else:
            writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    requantize(sys.argv[1], sys.argv[2], Q[sys.argv[3]])
