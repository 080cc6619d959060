"""What a GGUF file says about its model's memory needs, read from the header only.

The header (metadata keys and tensor descriptions) is parsed with the ``gguf`` package's
:class:`gguf.GGUFReader`, which memory-maps the file lazily; the tensor data is never touched, so
a 20 GB model costs a few MiB of reads and a header-only or truncated file still describes its
model (``complete`` says whether all tensor data is present).

Key names and defaults follow llama.cpp b11434 (``src/llama-model.cpp``, ``src/models/*.cpp``,
``src/llama-hparams.cpp``):

- head dims: ``{arch}.attention.key_length`` / ``value_length``, else ``embedding_length /
  head_count``; sliding-window layers may have their own (``key_length_swa``/``value_length_swa``).
- KV heads: ``{arch}.attention.head_count_kv``, a scalar or one value per layer (default: the
  head count).
- sliding window: ``{arch}.attention.sliding_window`` (tokens) with
  ``{arch}.attention.sliding_window_pattern`` either one bool per layer or a period ``n`` (every
  ``n``-th layer is full attention); without the pattern key the architecture's built-in period
  applies (:data:`SWA_PERIODS`).
- ``{arch}.attention.shared_kv_layers``: the last ``n`` layers reuse earlier layers' KV (no cache).
"""

from __future__ import annotations

import functools
import hashlib
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.errors import StatedError

if TYPE_CHECKING:
    import gguf

SWA_PERIODS: dict[str, tuple[int, bool]] = {
    "gemma2": (2, False), "gemma3": (6, False), "gemma3n": (5, False),
    "gemma-embedding": (6, False), "cohere2": (4, False), "exaone4": (4, False),
    "llama4": (4, False), "olmo2": (4, False), "gpt-oss": (2, False), "afmoe": (4, False),
    "smallthinker": (4, True), "plamo3": (8, False),
}
"""Built-in sliding-window periods (``load_swa_pattern(ml, n, dense_first)`` calls in b11434's
``src/models/*.cpp``) used when the file carries no pattern key."""


class GgufError(StatedError, ValueError):
    """The file is missing, not a GGUF, truncated inside its header, or lacks a required key;
    the message names the file and the cause."""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor as described in the header."""

    name: str
    shape: tuple[int, ...]
    """ggml order (``ne0`` first)."""
    ggml_type: str
    n_bytes: int
    offset: int
    """Byte offset of its data from the start of the data section."""


@functools.cache
def _header_reader() -> type[gguf.GGUFReader]:
    """The :class:`_HeaderReader` class, made on first use: subclassing ``gguf.GGUFReader``
    imports gguf and numpy (~0.25 s), which importing this module (:class:`GgufError`, for every
    command's error handler) should not cost."""
    import gguf
    import numpy as np

    class _HeaderReader(gguf.GGUFReader):
        """A :class:`gguf.GGUFReader` that reads the header fast and never maps tensor data.

        Two steps of the stock reader (gguf-py's layout since 0.10) are replaced: ``_build_tensors``
        records tensor descriptions without building numpy views of their data (which fails on a
        file whose data is missing), and ``_get_field_parts`` reads a numeric array in one slice and
        skips over a string array's items, keeping only its length: the stock per-item loop takes
        seconds on a 262k-token vocabulary. Array fields hold ``[item type, length, values]``
        (values absent for string arrays).
        """

        entries: list[TensorEntry]

        def _get_field_parts(self, orig_offs: int, raw_type: int
                             ) -> tuple[int, list[np.ndarray], list[int], list[gguf.GGUFValueType]]:
            if gguf.GGUFValueType(raw_type) != gguf.GGUFValueType.ARRAY:
                return super()._get_field_parts(orig_offs, raw_type)
            item_type = self._get(orig_offs, np.uint32)
            length = self._get(orig_offs + 4, np.uint64)
            offs = orig_offs + 12
            sub = gguf.GGUFValueType(int(item_type[0]))
            count = int(length[0])
            if sub == gguf.GGUFValueType.STRING:
                view = memoryview(self.data)
                fmt = "<Q" if self.endianess == gguf.GGUFEndian.LITTLE else ">Q"
                for _ in range(count):
                    offs += 8 + struct.unpack_from(fmt, view, offs)[0]
                if offs > len(self.data):
                    raise ValueError("string array runs past the end of the file")
                return offs - orig_offs, [item_type, length], [], [gguf.GGUFValueType.ARRAY, sub]
            nptype = self.gguf_scalar_to_np.get(sub)
            if nptype is None:
                return super()._get_field_parts(orig_offs, raw_type)
            values = self._get(offs, nptype, count)
            if len(values) != count:
                raise ValueError("array runs past the end of the file")
            return (12 + int(values.nbytes), [item_type, length, values], [2],
                    [gguf.GGUFValueType.ARRAY, sub])

        def _build_tensors(self, start_offs: int, fields: list[gguf.ReaderField]) -> None:
            self.entries = []
            for field in fields:
                _len, name, _n_dims, dims, raw_type, offset = field.parts
                qtype = gguf.GGMLQuantizationType(int(raw_type[0]))
                block, type_size = gguf.GGML_QUANT_SIZES[qtype]
                n_elems = int(np.prod(dims.astype(np.uint64))) if len(dims) else 1
                self.entries.append(TensorEntry(
                    name=bytes(name).decode("utf-8"), shape=tuple(int(d) for d in dims),
                    ggml_type=qtype.name, n_bytes=n_elems * type_size // block,
                    offset=int(offset[0])))

    return _HeaderReader


@dataclass(frozen=True)
class GgufInfo:
    """The model facts that decide weights and KV-cache memory."""

    path: Path
    architecture: str
    n_layer: int
    n_embd: int
    n_head: int
    n_ff: int
    """Largest feed-forward width over the layers (0 when the file does not say)."""
    n_head_kv: tuple[int, ...]
    """KV heads per layer."""
    head_dim_k: int
    head_dim_v: int
    head_dim_k_swa: int
    head_dim_v_swa: int
    n_swa: int
    """Sliding-window length in tokens; 0 for none."""
    swa_layers: tuple[bool, ...]
    """True for each sliding-window layer."""
    n_kv_layers: int
    """Layers that own a KV cache (the rest share an earlier layer's)."""
    n_vocab: int
    context_length: int | None
    """Training context in tokens, when the file says."""
    file_size: int
    tensor_bytes: int
    """Sum of all tensor data sizes in bytes (what the weights take once loaded)."""
    data_end: int
    """Byte offset where the last tensor's data ends; past ``file_size`` when truncated."""
    tensors: tuple[TensorEntry, ...]

    @property
    def complete(self) -> bool:
        """True when the file holds all the tensor data its header describes."""
        return self.data_end <= self.file_size

    def is_swa(self, il: int) -> bool:
        """Whether layer ``il`` uses the sliding window."""
        return self.n_swa > 0 and self.swa_layers[il]

    def kv_width(self, il: int) -> tuple[int, int]:
        """Elements per token of layer ``il``'s K and V rows (heads x head dim)."""
        swa = self.is_swa(il)
        k = self.head_dim_k_swa if swa else self.head_dim_k
        v = self.head_dim_v_swa if swa else self.head_dim_v
        return k * self.n_head_kv[il], v * self.n_head_kv[il]


def _value(field: gguf.ReaderField) -> Any:
    """A field's value: scalar, str, a list for numeric arrays, the length for string arrays
    (as :class:`_HeaderReader` stores them)."""
    import gguf  # deferred: startup time

    vtype = gguf.GGUFValueType(field.types[0])
    if vtype == gguf.GGUFValueType.ARRAY:
        if field.types[-1] == gguf.GGUFValueType.STRING:
            return int(field.parts[4][0])
        return field.parts[-1].tolist()
    if vtype == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", "replace")
    return field.parts[field.data[0]].tolist()[0]


def _per_layer(value: Any, n_layer: int, key: str, path: Path) -> tuple[int, ...]:
    if isinstance(value, list):
        if len(value) != n_layer:
            raise GgufError(f"{path}: {key} has {len(value)} entries for {n_layer} layers")
        return tuple(int(v) for v in value)
    return (int(value),) * n_layer


def _swa_layers(meta: dict[str, Any], arch: str, n_layer: int, path: Path) -> tuple[bool, ...]:
    """Per-layer sliding-window flags, following b11434's ``load_swa_pattern``."""
    key = f"{arch}.attention.sliding_window_pattern"
    pattern = meta.get(key)
    if isinstance(pattern, list):
        if len(pattern) < n_layer:
            raise GgufError(f"{path}: {key} has {len(pattern)} entries for {n_layer} layers")
        return tuple(bool(v) for v in pattern[:n_layer])
    period, dense_first = SWA_PERIODS.get(arch, (0, False))
    if pattern is not None:
        period = int(pattern)
    if dense_first:
        return tuple(period == 0 or il % period != 0 for il in range(n_layer))
    return tuple(period == 0 or il % period < period - 1 for il in range(n_layer))


def _read_header(path: Path) -> tuple[gguf.GGUFReader, dict[str, Any]]:
    if not path.is_file():
        raise GgufError(f"{path}: no such file")
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        raise GgufError(f"{path}: not a GGUF file (starts with {magic!r}, not b'GGUF')")
    try:
        reader = _header_reader()(path)
        meta = {name: _value(f) for name, f in reader.fields.items()}
    except (ValueError, IndexError, KeyError, OverflowError, TypeError, struct.error) as exc:
        raise GgufError(f"{path}: truncated or corrupt GGUF header ({exc}); "
                        "download the file again") from exc
    return reader, meta


def gguf_metadata(path: Path) -> dict[str, Any]:
    """``path``'s metadata keys and values, read from the header only (tensor data is never
    mapped; string arrays such as the vocabulary come back as their length).

    Raises :class:`GgufError` when the file is missing, not a GGUF, or its header is corrupt.
    """
    return _read_header(Path(path))[1]


def read_gguf_info(path: Path) -> GgufInfo:
    """Read ``path``'s header into a :class:`GgufInfo`.

    Raises :class:`GgufError` when the file is missing or empty, is not a GGUF, its header is
    truncated or corrupt, or the architecture's block count / embedding length / head count is
    missing.
    """
    path = Path(path)
    reader, meta = _read_header(path)
    size = path.stat().st_size
    arch = meta.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise GgufError(f"{path}: no general.architecture key")

    def need(key: str) -> Any:
        full = f"{arch}.{key}"
        if full not in meta:
            raise GgufError(f"{path}: missing key {full}")
        return meta[full]

    n_layer = int(need("block_count"))
    n_embd = int(need("embedding_length"))
    heads = _per_layer(need("attention.head_count"), n_layer, "head_count", path)
    n_head = max(heads) if heads else 0
    kv_raw = meta.get(f"{arch}.attention.head_count_kv", n_head)
    n_head_kv = _per_layer(kv_raw, n_layer, "head_count_kv", path)
    default_dim = n_embd // n_head if n_head else 0
    head_k = int(meta.get(f"{arch}.attention.key_length", default_dim))
    head_v = int(meta.get(f"{arch}.attention.value_length", default_dim))
    n_swa = int(meta.get(f"{arch}.attention.sliding_window", 0))
    swa = _swa_layers(meta, arch, n_layer, path) if n_swa else (False,) * n_layer
    ff = meta.get(f"{arch}.feed_forward_length", 0)
    n_ff = max(ff) if isinstance(ff, list) and ff else int(ff or 0)
    shared = int(meta.get(f"{arch}.attention.shared_kv_layers", 0))
    embd = next((t for t in reader.entries if t.name == "token_embd.weight"), None)
    n_vocab = int(meta.get("tokenizer.ggml.tokens") or meta.get(f"{arch}.vocab_size")
                  or (embd.shape[-1] if embd and embd.shape else 0))
    ctx = meta.get(f"{arch}.context_length")
    entries = tuple(reader.entries)
    data_end = reader.data_offset + max((t.offset + t.n_bytes for t in entries), default=0)
    return GgufInfo(
        path=path, architecture=arch, n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_ff=n_ff,
        n_head_kv=n_head_kv, head_dim_k=head_k, head_dim_v=head_v,
        head_dim_k_swa=int(meta.get(f"{arch}.attention.key_length_swa", head_k)),
        head_dim_v_swa=int(meta.get(f"{arch}.attention.value_length_swa", head_v)),
        n_swa=n_swa, swa_layers=swa, n_kv_layers=max(0, n_layer - shared), n_vocab=n_vocab,
        context_length=int(ctx) if ctx is not None else None, file_size=size,
        tensor_bytes=sum(t.n_bytes for t in entries), data_end=int(data_end), tensors=entries)


def string_array_digest(path: Path, key: str) -> tuple[int, str] | None:
    """(item count, sha256 of the raw items) of the string array ``key`` in ``path``'s header
    (e.g. ``tokenizer.ggml.tokens``: two files with equal digests have the same vocabulary, id for
    id); None when the key is absent or not a string array. Reads the header only.

    Raises :class:`GgufError` when the file is missing, not a GGUF, or its header is corrupt.
    """
    import gguf  # deferred: startup time
    import numpy as np

    reader, _ = _read_header(Path(path))
    field = reader.fields.get(key)
    if field is None or len(field.types) < 2 or field.types[0] != gguf.GGUFValueType.ARRAY \
            or field.types[-1] != gguf.GGUFValueType.STRING:
        return None
    length = field.parts[4]  # key length, key, value type, item type, item count
    base = reader.data.__array_interface__["data"][0]
    start = int(length.__array_interface__["data"][0] - base) + np.dtype(np.uint64).itemsize
    count = int(length[0])
    view = memoryview(reader.data)
    fmt = "<Q" if reader.endianess == gguf.GGUFEndian.LITTLE else ">Q"
    end = start
    for _ in range(count):
        end += 8 + struct.unpack_from(fmt, view, end)[0]
    if end > len(reader.data):
        raise GgufError(f"{path}: {key} runs past the end of the file")
    return count, hashlib.sha256(view[start:end]).hexdigest()
