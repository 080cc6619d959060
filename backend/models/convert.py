"""``agent backend convert-draft``: DFlash draft GGUFs between BeeLlama ≤0.3's ``dflash-draft``
format and upstream's ``dflash`` format, both ways.

The seed's Gemma 4 draft is published in BeeLlama's old format, which upstream llama.cpp and
BeeLlama ≥0.4 do not load; the project's own trained drafts (train/README.md) are upstream
``dflash`` files, which BeeLlama v0.3.1 does not load either (it knows an *earlier* upstream key
set: docs/design/beellama.md). The mapping (docs/design/backend-facts.md, "DFlash draft GGUF";
BeeLlama v0.3.1 ``src/models/dflash_draft.cpp``, ``conversion/dflash.py``):

- architecture ``dflash-draft`` ↔ ``dflash``; generic keys ``dflash-draft.*`` ↔ ``dflash.*``;
- ``dflash-draft.dflash.block_size`` ↔ ``dflash.block_size``;
- ``dflash-draft.dflash.mask_token_id`` ↔ ``tokenizer.ggml.mask_token_id`` (u32);
- ``dflash-draft.dflash.target_layer_ids`` (u32; HF ids, each captured as the layer's
  *output*, ``l_out-<id>`` in v0.3.1's ``llama-context.cpp``) ↔ ``dflash.target_layers`` (i32;
  upstream reads the *input* of that layer) = ids + 1: the output of layer L is the input of
  layer L+1. Measured on an H200 with a trained draft: the shifted ids accept more than the
  unshifted ones (2.65 % vs 2.0 %, docs/design/beellama.md);
- ``dflash-draft.dflash.n_target_features`` exists only in the old format (the width of
  ``dflash_fc``): dropped going new, re-derived from the ``fc`` tensor's shape going old;
- going old, ``dflash-draft.attention.causal = false`` is added when the draft does not say
  (BeeLlama's own converter writes it; without it v0.3.1 runs the draft's attention causally,
  while upstream's DFlash attention is always non-causal);
- tensors ``dflash_fc`` ↔ ``fc``, ``dflash_hidden_norm`` ↔ ``enc.output_norm``, per-layer
  ``post_attention_norm`` (the pre-FFN norm) ↔ ``ffn_norm``; everything else is copied byte for
  byte, quantization included, in the same order.

Keys keep their order and types, so a BeeLlama-made draft converted old → new → old comes back
with the same keys and the same tensor bytes (tests/test_convert_roundtrip.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from backend.errors import StatedError

# gguf (with numpy, ~0.25 s) is imported by the functions that read or write a file, so that
# importing this module (ConvertError, for every command's error handler) stays cheap.
if TYPE_CHECKING:
    import gguf

OLD_ARCH, NEW_ARCH = "dflash-draft", "dflash"
Direction = Literal["auto", "dflash", "dflash-draft"]
_OLD = f"{OLD_ARCH}."
_NEW = f"{NEW_ARCH}."
_N_FEATURES = f"{_OLD}dflash.n_target_features"
_OLD_IDS = f"{_OLD}dflash.target_layer_ids"
_OLD_MASK = f"{_OLD}dflash.mask_token_id"
_OLD_CAUSAL = f"{_OLD}attention.causal"
_NEW_LAYERS = f"{_NEW}target_layers"
_NEW_MASK = "tokenizer.ggml.mask_token_id"
_TENSORS_TO_NEW = (("dflash_fc.", "fc."), ("dflash_hidden_norm.", "enc.output_norm."))


class ConvertError(StatedError, ValueError):
    """The input is not a DFlash draft that can be converted, or the output cannot be written."""

    plain = True


def _tensor_name(name: str, to: str = NEW_ARCH) -> str:
    """A tensor's name in the ``to`` format."""
    for old, new in _TENSORS_TO_NEW:
        src, dst = (old, new) if to == NEW_ARCH else (new, old)
        if name.startswith(src):
            return dst + name.removeprefix(src)
    if to == NEW_ARCH:
        return name.replace(".post_attention_norm.", ".ffn_norm.")
    return name.replace(".ffn_norm.", ".post_attention_norm.")


def _architecture(reader: gguf.GGUFReader) -> str:
    import gguf  # deferred: startup time

    field = reader.fields.get(gguf.Keys.General.ARCHITECTURE)
    try:
        return str(field.contents()) if field is not None else ""
    except (ValueError, IndexError, UnicodeDecodeError):
        return ""


def _open(src: Path) -> gguf.GGUFReader:
    if not src.is_file():
        raise ConvertError(f"{src} does not exist or is not a file")
    import gguf  # deferred: startup time

    try:
        return gguf.GGUFReader(src)
    # The gguf parser reads untrusted bytes and fails in many ways (ValueError, struct and
    # numpy errors, IndexError on a truncated file): any of them means "not a GGUF".
    except Exception as exc:  # noqa: BLE001
        raise ConvertError(f"{src} is not a readable GGUF file: {exc or type(exc).__name__}") \
            from exc


def convert_draft(src: Path, dst: Path, force: bool = False,
                  to: Direction = NEW_ARCH) -> dict[str, object]:
    """Write ``src`` converted to the ``to`` format (``dflash``: upstream and BeeLlama ≥0.4;
    ``dflash-draft``: BeeLlama ≤0.3; ``auto``: the other one of ``src``'s) to ``dst``; returns a
    summary (architecture, target_layers as written, tensors renamed, tensors).

    Raises :class:`ConvertError` when ``src`` is not a readable GGUF, is not a DFlash draft, is
    already in the ``to`` format, lacks its target layers, or has a target layer the other format
    cannot express (upstream id 0, the token embeddings, has no BeeLlama ≤0.3 id); or when
    ``dst`` exists without ``force``, is ``src`` itself, or cannot be written.
    """
    if dst.exists() and not force:
        raise ConvertError(f"{dst} exists; choose another output or pass --force")
    reader = _open(src)
    if dst.exists() and dst.resolve() == src.resolve():
        raise ConvertError(f"{dst} is the input file; write the conversion somewhere else")
    arch = _architecture(reader)
    if arch not in (OLD_ARCH, NEW_ARCH):
        raise ConvertError(f"{src} has architecture '{arch or 'none'}', not a DFlash draft "
                           f"(BeeLlama's '{OLD_ARCH}' or upstream's '{NEW_ARCH}')")
    target = (OLD_ARCH if arch == NEW_ARCH else NEW_ARCH) if to == "auto" else to
    if arch == target == NEW_ARCH:
        raise ConvertError(f"{src} is already an upstream '{NEW_ARCH}' draft; use it as it is "
                           f"(or convert it to BeeLlama <=0.3's format with --to {OLD_ARCH})")
    if arch == target:
        raise ConvertError(f"{src} is already a BeeLlama '{OLD_ARCH}' draft; use it as it is "
                           f"(or convert it to upstream's format with --to {NEW_ARCH})")
    plan = _to_new(reader, src) if target == NEW_ARCH else _to_old(reader, src)
    layers: list[int] = plan.pop("__layers__")  # type: ignore[assignment]
    return _write(reader, src, dst, target, plan, layers)


KeyPlan = dict[str, object]
"""Output keys in order: name → (value, type, sub-type), or the list of target layers."""


def _field_entry(field: gguf.ReaderField) -> tuple[object, gguf.GGUFValueType,
                                                   gguf.GGUFValueType | None]:
    import gguf  # deferred: startup time

    vtype = field.types[0]
    sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
    return field.contents(), vtype, sub


def _layer_ids(reader: gguf.GGUFReader, key: str, src: Path) -> list[int]:
    field = reader.fields.get(key)
    if field is None:
        raise ConvertError(f"{src} has no {key}; without its target layers it cannot be mapped")
    try:
        ids = [int(i) for i in field.contents()]
    except (TypeError, ValueError) as exc:
        raise ConvertError(f"{src}: {key} is not a list of layer ids") from exc
    if not ids:
        raise ConvertError(f"{src}: {key} is empty; a DFlash draft needs target layers")
    return ids


def _to_new(reader: gguf.GGUFReader, src: Path) -> KeyPlan:
    import gguf  # deferred: startup time

    layers = [i + 1 for i in _layer_ids(reader, _OLD_IDS, src)]
    plan: KeyPlan = {}
    for field in reader.fields.values():
        name = field.name
        if name == gguf.Keys.General.ARCHITECTURE or name.startswith("GGUF.") \
                or name == _N_FEATURES:
            continue
        if name == _OLD_IDS:
            plan[_NEW_LAYERS] = (layers, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32)
            continue
        if name == _OLD_MASK:
            name = _NEW_MASK
        elif name.startswith(f"{_OLD}dflash."):
            name = _NEW + name.removeprefix(f"{_OLD}dflash.")
        elif name.startswith(_OLD):
            name = _NEW + name.removeprefix(_OLD)
        plan[name] = _field_entry(field)
    plan["__layers__"] = layers
    return plan


def _to_old(reader: gguf.GGUFReader, src: Path) -> KeyPlan:
    import gguf  # deferred: startup time

    ids = _layer_ids(reader, _NEW_LAYERS, src)
    if min(ids) < 1:
        raise ConvertError(f"{src}: target layer 0 (the token embeddings) has no BeeLlama <=0.3 "
                           "equivalent (it captures layer outputs: id = upstream id - 1)")
    layers = [i - 1 for i in ids]
    fc = next((t for t in reader.tensors if t.name == "fc.weight"), None)
    if fc is None:
        raise ConvertError(f"{src} has no fc.weight tensor; it is not a complete DFlash draft")
    features = int(fc.shape[0])  # ggml ne0: n_target_layers * n_embd
    plan: KeyPlan = {}
    for field in reader.fields.values():
        name = field.name
        if name == gguf.Keys.General.ARCHITECTURE or name.startswith("GGUF."):
            continue
        if name == _NEW_LAYERS:
            plan[_OLD_IDS] = (layers, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT32)
            # BeeLlama's converter writes n_target_features right after the ids.
            plan[_N_FEATURES] = (features, gguf.GGUFValueType.UINT32, None)
            continue
        if name == _NEW_MASK:
            value, vtype, sub = _field_entry(field)
            plan[_OLD_MASK] = (int(value), gguf.GGUFValueType.UINT32, None)  # type: ignore
            continue
        if name in (f"{_NEW}block_size", f"{_NEW}n_target_features"):
            name = f"{_OLD}dflash." + name.removeprefix(_NEW)
        elif name.startswith(_NEW):
            name = _OLD + name.removeprefix(_NEW)
        plan[name] = _field_entry(field)
    if _OLD_MASK not in plan:
        raise ConvertError(f"{src} has no {_NEW_MASK}; BeeLlama needs the draft's mask token")
    plan.setdefault(_OLD_CAUSAL, (False, gguf.GGUFValueType.BOOL, None))
    plan["__layers__"] = layers
    return plan


def _write(reader: gguf.GGUFReader, src: Path, dst: Path, arch: str, plan: KeyPlan,
           layers: list[int]) -> dict[str, object]:
    import gguf  # deferred: startup time

    tmp = dst.with_name(dst.name + ".part")
    renamed = 0
    try:
        writer = gguf.GGUFWriter(tmp, arch)
        for name, entry in plan.items():
            value, vtype, sub = entry  # type: ignore[misc]
            writer.add_key_value(name, value, vtype, sub_type=sub)
        for tensor in reader.tensors:
            new = _tensor_name(tensor.name, arch)
            renamed += new != tensor.name
            writer.add_tensor_info(new, tensor.data.shape, tensor.data.dtype,
                                   tensor.data.nbytes, tensor.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for tensor in reader.tensors:
            writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
        writer.close()
        os.replace(tmp, dst)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConvertError(f"cannot write {dst}: {exc.strerror or exc}") from exc
    key = "target_layers" if arch == NEW_ARCH else "target_layer_ids"
    return {"architecture": arch, key: layers, "target_layers": layers,
            "tensors_renamed": renamed, "tensors": len(reader.tensors), "source": str(src)}
