"""Token-id sequences on disk: one compact ``.npz`` per file, as small as the data allows.

A file holds ``n`` sequences, each a prompt followed by the target's greedy continuation (a
*prompt set* is the same with no continuation: every ``plen`` is the whole length):

- ``tokens`` — all ids, concatenated (uint16 when every id fits, else int32);
- ``offs`` — int64 ``[n + 1]``: sequence ``i`` is ``tokens[offs[i]:offs[i + 1]]``;
- ``plens`` — int32 ``[n]``: prompt lengths in tokens;
- optional ``src`` (int16 ``[n]``, an index into ``src_names``), ``heldout`` (bool ``[n]``),
  ``grammar`` (int16 ``[n]``, an index into ``grammars``, −1 for none: the JSON schema a
  ``json``-protocol request decodes under).

``shared/dflash/smollm2-greedy-seqs-v1.npz`` (``tokens``, ``offs``, ``plens`` only) loads as is:
its sources read ``unknown`` and its held-out share follows :func:`heldout_by_hash`.
"""

from __future__ import annotations

import hashlib
import zipfile
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from train.errors import InputError

UNKNOWN = "unknown"
HELDOUT_FRACTION = 0.05


def heldout_by_hash(prompt: np.ndarray, fraction: float = HELDOUT_FRACTION) -> bool:
    """Whether a prompt (its token ids) is held out: a stable hash, so the same prompt is held
    out in every run and every merge of files."""
    digest = hashlib.sha1(np.asarray(prompt, dtype=np.int64).tobytes()).digest()
    return int.from_bytes(digest[:4], "big") % 10_000 < fraction * 10_000


@dataclass
class Sequences:
    """``n`` token-id sequences with their prompt lengths, sources and held-out flags."""

    tokens: np.ndarray
    offs: np.ndarray
    plens: np.ndarray
    src: np.ndarray
    src_names: tuple[str, ...]
    heldout: np.ndarray
    grammar: np.ndarray
    grammars: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.plens)

    def ids(self, i: int) -> np.ndarray:
        """Sequence ``i``'s token ids (int64)."""
        return self.tokens[self.offs[i]:self.offs[i + 1]].astype(np.int64)

    def prompt(self, i: int) -> np.ndarray:
        """Sequence ``i``'s prompt ids (int64)."""
        return self.ids(i)[: int(self.plens[i])]

    def lengths(self) -> np.ndarray:
        """Tokens per sequence, int64 ``[n]``."""
        return np.diff(self.offs)

    def source(self, i: int) -> str:
        return self.src_names[int(self.src[i])]

    def schema(self, i: int) -> str | None:
        """The JSON schema sequence ``i``'s continuation decodes under, or None."""
        g = int(self.grammar[i])
        return None if g < 0 else self.grammars[g]

    def response_tokens(self) -> int:
        """Tokens after the prompts, over all sequences."""
        return int(self.lengths().sum() - self.plens.sum())

    def select(self, index: Sequence[int] | np.ndarray) -> Sequences:
        """The sequences at ``index``, in that order."""
        return build([self.ids(i) for i in index], [int(self.plens[i]) for i in index],
                     [self.source(i) for i in index], [bool(self.heldout[i]) for i in index],
                     [self.schema(i) for i in index])


def generation_order(seqs: Sequences, seed: int = 0) -> list[int]:
    """The order to generate in: the agent's requests first (few, and what the draft must
    learn most), then the rest in a seeded shuffle, so a run cut short by its time budget
    still covers every kind of prompt."""
    rng = np.random.default_rng(seed)
    agent = [i for i in range(len(seqs)) if seqs.source(i).startswith("agent-")]
    rest = [i for i in range(len(seqs)) if not seqs.source(i).startswith("agent-")]
    return agent + [rest[k] for k in rng.permutation(len(rest))]


def build(ids: Sequence[np.ndarray | list[int]], plens: Sequence[int], sources: Sequence[str],
          heldout: Sequence[bool], schemas: Sequence[str | None] | None = None) -> Sequences:
    """A :class:`Sequences` from per-sequence lists (``schemas``: None entries for none)."""
    n = len(ids)
    if not len(plens) == len(sources) == len(heldout) == n:
        raise ValueError("ids, plens, sources and heldout must have one entry per sequence")
    schemas = list(schemas) if schemas is not None else [None] * n
    offs = np.zeros(n + 1, dtype=np.int64)
    offs[1:] = np.cumsum([len(x) for x in ids]) if n else []
    tokens = (np.concatenate([np.asarray(x, dtype=np.int64) for x in ids]) if n
              else np.zeros(0, dtype=np.int64))
    names = tuple(dict.fromkeys(sources))
    grammars = tuple(dict.fromkeys(s for s in schemas if s is not None))
    return Sequences(
        tokens=tokens.astype(np.int32), offs=offs, plens=np.asarray(plens, dtype=np.int32),
        src=np.asarray([names.index(s) for s in sources], dtype=np.int16),
        src_names=names, heldout=np.asarray(heldout, dtype=bool),
        grammar=np.asarray([-1 if s is None else grammars.index(s) for s in schemas],
                           dtype=np.int16),
        grammars=grammars)


def concat(parts: Iterable[Sequences]) -> Sequences:
    """All sequences of ``parts``, in order, their source names merged."""
    parts = list(parts)
    ids, plens, sources, heldout, schemas = [], [], [], [], []
    for part in parts:
        for i in range(len(part)):
            ids.append(part.ids(i))
            plens.append(int(part.plens[i]))
            sources.append(part.source(i))
            heldout.append(bool(part.heldout[i]))
            schemas.append(part.schema(i))
    return build(ids, plens, sources, heldout, schemas)


def save(seqs: Sequences, path: Path) -> Path:
    """Write ``seqs`` to ``path`` (compressed npz; ids as uint16 when they fit)."""
    tokens = seqs.tokens
    if tokens.size == 0 or int(tokens.max()) < 2**16:
        tokens = tokens.astype(np.uint16)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        np.savez_compressed(
            fh, tokens=tokens, offs=seqs.offs, plens=seqs.plens, src=seqs.src,
            src_names=np.asarray(list(seqs.src_names), dtype=str), heldout=seqs.heldout,
            grammar=seqs.grammar, grammars=np.asarray(list(seqs.grammars), dtype=str))
    return path


def save_shards(seqs: Sequences, stem: Path, max_tokens: int) -> list[Path]:
    """Write ``seqs`` as ``{stem}-000.npz``, ``{stem}-001.npz``… of at most ``max_tokens``
    tokens each (a sequence is never split), so each file stays under a transfer limit."""
    paths, start, count = [], 0, 0
    lengths = seqs.lengths()
    for i in range(len(seqs) + 1):
        if i == len(seqs) or (count and count + lengths[i] > max_tokens):
            part = seqs.select(range(start, i))
            paths.append(save(part, stem.with_name(f"{stem.name}-{len(paths):03d}.npz")))
            start, count = i, 0
        if i < len(seqs):
            count += int(lengths[i])
    return paths


NPZ_ERRORS = (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError, zlib.error)
"""What reading a damaged ``.npz`` raises: a damaged member's compressed data gives
``zlib.error``, which is none of the others."""


def npz_error(path: Path, exc: BaseException) -> InputError:
    """One line for a file :data:`NPZ_ERRORS` came from. Not numpy's own words where they
    suggest ``allow_pickle``: the file is not one of ours, and unpickling it is no fix."""
    why = "not an .npz of arrays" if "pickle" in str(exc) else str(exc) or type(exc).__name__
    return InputError(f"{path}: not a readable npz file ({why})")


def _strings(z: np.lib.npyio.NpzFile, key: str) -> tuple[str, ...]:
    return tuple(str(s) for s in z[key]) if key in z.files else ()


def load(path: Path) -> Sequences:
    """Read one sequences file; raises :class:`InputError` naming the file and what is wrong
    (missing, not an npz, a key missing, offsets or lengths that do not fit together)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("tokens", "offs", "plens") if k not in z.files]
            if missing:
                raise InputError(f"{path}: not a sequences file (no {', '.join(missing)}; "
                                 "expected tokens, offs, plens)")
            tokens, offs, plens = z["tokens"], z["offs"].astype(np.int64), z["plens"]
            n = len(plens)
            names = _strings(z, "src_names") or (UNKNOWN,)
            src = z["src"].astype(np.int16) if "src" in z.files else np.zeros(n, np.int16)
            heldout = z["heldout"].astype(bool) if "heldout" in z.files else None
            grammars = _strings(z, "grammars")
            grammar = (z["grammar"].astype(np.int16) if "grammar" in z.files
                       else np.full(n, -1, np.int16))
    except InputError:
        raise
    except NPZ_ERRORS as exc:
        raise npz_error(path, exc) from exc
    _check(path, tokens, offs, plens, src, names, grammar, grammars,
           heldout if heldout is not None else np.zeros(n, bool))
    seqs = Sequences(tokens=tokens.astype(np.int32), offs=offs, plens=plens.astype(np.int32),
                     src=src, src_names=names, heldout=np.zeros(n, bool), grammar=grammar,
                     grammars=grammars)
    seqs.heldout = heldout if heldout is not None else np.asarray(
        [heldout_by_hash(seqs.prompt(i)) for i in range(n)], dtype=bool)
    return seqs


def _check(path: Path, tokens: np.ndarray, offs: np.ndarray, plens: np.ndarray,
           src: np.ndarray, names: tuple[str, ...], grammar: np.ndarray,
           grammars: tuple[str, ...], heldout: np.ndarray) -> None:
    n = len(plens)
    if tokens.ndim != 1 or offs.ndim != 1 or plens.ndim != 1:
        raise InputError(f"{path}: tokens, offs and plens must be one-dimensional")
    if not np.issubdtype(tokens.dtype, np.integer) or not np.issubdtype(plens.dtype, np.integer):
        raise InputError(f"{path}: tokens and plens must be integers, not {tokens.dtype}")
    if len(offs) != n + 1 or (n + 1 and (offs[0] != 0 or offs[-1] != len(tokens))):
        raise InputError(f"{path}: offs must run from 0 to len(tokens) = {len(tokens)} with one "
                         f"entry per sequence plus one ({len(offs)} entries for {n} sequences)")
    lengths = np.diff(offs)
    if (lengths < 1).any():
        raise InputError(f"{path}: offs must increase (sequence {int(np.argmin(lengths))} is "
                         "empty or negative)")
    if ((plens < 1) | (plens > lengths)).any():
        bad = int(np.flatnonzero((plens < 1) | (plens > lengths))[0])
        raise InputError(f"{path}: sequence {bad}'s prompt length {int(plens[bad])} is outside "
                         f"1..{int(lengths[bad])}")
    if tokens.size and int(tokens.min()) < 0:
        raise InputError(f"{path}: negative token ids")
    for key, arr, count in (("src", src, len(names)), ("grammar", grammar, len(grammars))):
        if len(arr) != n or (n and (int(arr.max()) >= count or int(arr.min()) < -1
                                    or (key == "src" and int(arr.min()) < 0))):
            raise InputError(f"{path}: {key} must hold one valid index per sequence")
    if len(heldout) != n:
        raise InputError(f"{path}: heldout must hold one flag per sequence")


def load_many(paths: Iterable[Path]) -> Sequences:
    """All sequences of ``paths`` (files or folders of ``*.npz``), in order."""
    files: list[Path] = []
    for path in map(Path, paths):
        files += sorted(path.glob("*.npz")) if path.is_dir() else [path]
    if not files:
        raise InputError("no sequences file given (or the folder holds no *.npz)")
    return concat(load(p) for p in files) if len(files) > 1 else load(files[0])
