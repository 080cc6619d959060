"""``agent backend convert-draft``: BeeLlama ≤0.3 ``dflash-draft`` GGUF → upstream ``dflash``.

The seed's Gemma 4 draft is published in BeeLlama's old format, which upstream llama.cpp and
BeeLlama ≥0.4 do not load. The mapping (BACKEND-FACTS.md, "DFlash draft GGUF"):

- architecture ``dflash-draft`` → ``dflash``; generic keys ``dflash-draft.*`` → ``dflash.*``;
- ``dflash-draft.dflash.block_size`` → ``dflash.block_size``;
- ``dflash-draft.dflash.mask_token_id`` → ``tokenizer.ggml.mask_token_id``;
- ``dflash-draft.dflash.target_layer_ids`` (HF ids, captured as layer *outputs*) →
  ``dflash.target_layers`` = ids + 1 (upstream reads the *input* of that layer; the output of
  layer L is the input of layer L+1);
- tensors ``dflash_fc`` → ``fc``, ``dflash_hidden_norm`` → ``enc.output_norm``, per-layer
  ``post_attention_norm`` (the pre-FFN norm) → ``ffn_norm``; everything else is copied
  byte for byte, quantization included.
"""

from __future__ import annotations

import os
from pathlib import Path

import gguf

OLD_ARCH, NEW_ARCH = "dflash-draft", "dflash"
_OLD = f"{OLD_ARCH}."
_DROPPED = {f"{_OLD}dflash.n_target_features"}


class ConvertError(ValueError):
    """The input is not an old-format DFlash draft, or the output cannot be written."""


def _tensor_name(name: str) -> str:
    if name.startswith("dflash_fc."):
        return "fc." + name.removeprefix("dflash_fc.")
    if name.startswith("dflash_hidden_norm."):
        return "enc.output_norm." + name.removeprefix("dflash_hidden_norm.")
    return name.replace(".post_attention_norm.", ".ffn_norm.")


def _architecture(reader: gguf.GGUFReader) -> str:
    field = reader.fields.get(gguf.Keys.General.ARCHITECTURE)
    return str(field.contents()) if field is not None else ""


def convert_draft(src: Path, dst: Path, force: bool = False) -> dict[str, object]:
    """Write the upstream-format draft for ``src`` to ``dst``; returns a summary
    (architecture, target_layers, tensors renamed, tensors copied).

    Raises :class:`ConvertError` when ``src`` is not a ``dflash-draft`` GGUF (an upstream
    ``dflash`` draft needs no conversion) or ``dst`` exists without ``force``.
    """
    if dst.exists() and not force:
        raise ConvertError(f"{dst} exists; choose another output or pass --force")
    try:
        reader = gguf.GGUFReader(src)
    except (OSError, ValueError) as exc:
        raise ConvertError(f"{src} is not a readable GGUF file: {exc}") from exc
    arch = _architecture(reader)
    if arch == NEW_ARCH:
        raise ConvertError(f"{src} is already an upstream 'dflash' draft; use it as it is")
    if arch != OLD_ARCH:
        raise ConvertError(f"{src} has architecture '{arch or 'none'}', not a BeeLlama "
                           f"'{OLD_ARCH}' draft")
    ids_field = reader.fields.get(f"{_OLD}dflash.target_layer_ids")
    if ids_field is None:
        raise ConvertError(f"{src} has no {_OLD}dflash.target_layer_ids; it cannot be mapped")
    target_layers = [int(i) + 1 for i in ids_field.contents()]
    tmp = dst.with_name(dst.name + ".part")
    writer = gguf.GGUFWriter(tmp, NEW_ARCH)
    renamed = 0
    for field in reader.fields.values():
        name = field.name
        if name == gguf.Keys.General.ARCHITECTURE or name.startswith("GGUF.") \
                or name in _DROPPED:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if name == f"{_OLD}dflash.target_layer_ids":
            writer.add_key_value("dflash.target_layers", target_layers,
                                 gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT32)
            continue
        if name == f"{_OLD}dflash.mask_token_id":
            name = "tokenizer.ggml.mask_token_id"
        elif name.startswith(f"{_OLD}dflash."):
            name = "dflash." + name.removeprefix(f"{_OLD}dflash.")
        elif name.startswith(_OLD):
            name = NEW_ARCH + "." + name.removeprefix(_OLD)
        writer.add_key_value(name, value, vtype, sub_type=sub)
    for tensor in reader.tensors:
        new = _tensor_name(tensor.name)
        renamed += new != tensor.name
        writer.add_tensor_info(new, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes,
                               tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()
    os.replace(tmp, dst)
    return {"architecture": NEW_ARCH, "target_layers": target_layers,
            "tensors_renamed": renamed, "tensors": len(reader.tensors)}
