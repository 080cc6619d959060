"""Generated responses without their prompts: what a GPU session brings back of its data.

A session's shards hold every prompt again beside its response: 4.1 M response tokens came
with 12.6 M prompt tokens (2026-12-04), ~25 MB to bring back where a call carries 64 MiB with
the 33 MB checkout. The prompts are already here, in the prompt set the generator read; so a
*responses file* keeps only each response and the index of its prompt in that set, and the
prompt set's id, and :func:`read_responses` joins them again. Responses are the target's own
greedy continuations, so those of earlier sessions are as good as new ones: carried in, they
train with the new session's, and ``generate --done`` skips their prompts.

Layout (compressed ``.npz``): ``prompt_set`` (str, :func:`prompt_set_id`), ``index`` (int32
``[n]``, prompt indices), ``tokens`` (uint16 when every id fits, else int32: the responses,
concatenated), ``offs`` (int64 ``[n + 1]``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from train.errors import InputError
from train.seqs import NPZ_ERRORS, Sequences, build, npz_error


def prompt_set_id(prompts: Sequences) -> str:
    """A stable id of a prompt set's prompts (sha256 of their ids and lengths, 16 hex
    digits): a responses file names the set its indices point into."""
    digest = hashlib.sha256()
    for i in range(len(prompts)):
        digest.update(prompts.prompt(i).astype(np.int64).tobytes())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def write_responses(seqs: Sequences, prompts: Sequences, path: Path) -> tuple[int, int]:
    """Write the responses of ``seqs`` (each sequence's tokens after its prompt) with their
    prompts' indices in ``prompts`` to ``path``, each prompt's once (greedy decoding gives a
    prompt one response); (written, repeats left out). Raises :class:`InputError` for a
    sequence whose prompt is not in ``prompts``."""
    # a prompt set can hold one prompt twice under two sources (prompts-v4: 201, e.g.
    # coding:func and coding:stdlib-func): its source picks the copy, so unpack gives it back
    by_source = {(prompts.prompt(i).tobytes(), prompts.source(i)): i for i in range(len(prompts))}
    by_ids = {key: i for (key, _), i in by_source.items()}
    index, parts, seen = [], [], set()
    for i in range(len(seqs)):
        key = seqs.prompt(i).tobytes()
        found = by_source.get((key, seqs.source(i)), by_ids.get(key))
        if found is None:
            raise InputError(f"sequence {i}'s prompt is not in the prompt set "
                             f"({seqs.plens[i]} tokens, source {seqs.source(i)})")
        if found in seen:
            continue
        seen.add(found)
        index.append(found)
        parts.append(seqs.ids(i)[int(seqs.plens[i]):])
    tokens = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    tokens = tokens.astype(np.uint16 if tokens.size == 0 or int(tokens.max()) < 2**16
                           else np.int32)
    offs = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")  # whole or absent: a copy may race it
    with partial.open("wb") as fh:
        np.savez_compressed(fh, prompt_set=np.asarray(prompt_set_id(prompts)),
                            index=np.asarray(index, np.int32), tokens=tokens, offs=offs)
    partial.replace(path)
    return len(index), len(seqs) - len(index)


def read_responses(paths: list[Path], prompts: Sequences) -> tuple[Sequences, int]:
    """(the sequences of responses files, each prompt from ``prompts`` with its source and
    held-out flag as ``generate`` writes them; repeats left out): a prompt answered in two
    files is kept once. Raises :class:`InputError` naming the file when one is missing, not
    a responses file, made from another prompt set, or inconsistent (offsets, indices, ids).
    """
    index, parts, seen, read = [], [], set(), 0
    for path in paths:
        at, tokens, offs = _read(Path(path), prompts)
        read += len(at)
        for k, j in enumerate(at.tolist()):
            if j not in seen:
                seen.add(j)
                index.append(j)
                parts.append(tokens[offs[k]:offs[k + 1]].astype(np.int64))
    ids = [np.concatenate([prompts.prompt(j), part]) for j, part in zip(index, parts,
                                                                         strict=True)]
    seqs = build(ids, [int(prompts.plens[j]) for j in index], [prompts.source(j) for j in index],
                 [bool(prompts.heldout[j]) for j in index])
    return seqs, read - len(index)


def _read(path: Path, prompts: Sequences) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(prompt indices, tokens, offsets) of one responses file, checked against ``prompts``
    (:func:`read_responses`)."""
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("prompt_set", "index", "tokens", "offs") if k not in z.files]
            if missing:
                raise InputError(f"{path}: not a responses file (no {', '.join(missing)})")
            made_from = str(z["prompt_set"])
            index, tokens, offs = z["index"], z["tokens"], z["offs"].astype(np.int64)
    except InputError:
        raise
    except NPZ_ERRORS as exc:
        raise npz_error(path, exc) from exc
    if made_from != prompt_set_id(prompts):
        raise InputError(f"{path}: made from another prompt set ({made_from}; these prompts "
                         f"are {prompt_set_id(prompts)})")
    n = len(index)
    if index.dtype.kind not in "iu" or tokens.dtype.kind not in "iu" \
            or tokens.size and int(tokens.min()) < 0:
        raise InputError(f"{path}: prompt indices and token ids must be whole numbers >= 0 "
                         f"(index {index.dtype}, tokens {tokens.dtype})")
    if offs.shape != (n + 1,) or n and (offs[0] != 0 or offs[-1] != len(tokens)
                                        or np.any(np.diff(offs) < 0)):
        raise InputError(f"{path}: offsets do not fit {n} responses of {len(tokens)} tokens")
    if n and (int(index.min()) < 0 or int(index.max()) >= len(prompts)):
        raise InputError(f"{path}: a prompt index outside the {len(prompts)} prompts")
    return index, tokens, offs
