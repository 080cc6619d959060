"""Target features computed once per sequence and kept on the device, for training.

Computing them online cost a target forward pass over every sequence of every batch: with
32 sequences of ~850 tokens a step, most of the 0.64 s a step that the first H200 run
measured (train/README.md). The target is frozen, so a sequence's features never change; one
pass over the training set in large length-sorted batches gives them all. 10 M tokens × 3
layers × 576 × bfloat16 is 35 GB: it fits an H200 beside the draft. When it does not fit,
``fit --features auto`` stores those of the sequences that do (:func:`fitting_subset`) and
trains on them; ``--features online`` computes them per batch for every sequence.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
import torch

from train.batches import padded_ids
from train.seqs import Sequences, generation_order
from train.target import Target


def _token_bytes(n_features: int, dtype: torch.dtype) -> int:
    """Bytes one token's features take in a :class:`FeatureStore`."""
    return n_features * torch.empty((), dtype=dtype).element_size()


def store_bytes(seqs: Sequences, index: Sequence[int], n_features: int,
                dtype: torch.dtype) -> int:
    """Bytes a :class:`FeatureStore` of the sequences at ``index`` takes."""
    lengths = seqs.lengths()
    tokens = int(sum(int(lengths[i]) for i in set(index)))
    return tokens * _token_bytes(n_features, dtype)


def free_bytes(device: torch.device) -> int:
    """Free memory of ``device``: the GPU's (CUDA), else the available RAM."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    # the stdlib's view of free RAM: the device image's torch stages need no psutil
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


STORE_SHARE = 0.6
"""The share of the free memory a :class:`FeatureStore` may take (the fit needs the rest)."""


def store_fits(need: int, device: torch.device) -> tuple[bool, str]:
    """Whether ``need`` bytes fit in :data:`STORE_SHARE` of :func:`free_bytes`; (answer, the
    figures as words)."""
    free = free_bytes(device)
    words = f"{need / 1e9:.1f} GB of features, {free / 1e9:.1f} GB free on {device.type}"
    return need <= STORE_SHARE * free, words


def fitting_subset(seqs: Sequences, index: Sequence[int], n_features: int,
                   dtype: torch.dtype, budget: int, seed: int = 0) -> list[int]:
    """The sequences of ``index`` (each once) whose features fit ``budget`` bytes: the agent's
    requests first, then the others in a seeded shuffle, as :func:`train.seqs.generation_order`
    generates them, so a cut keeps what the draft must learn most and the mix of the rest.
    Why: data carried from earlier sessions (train/responses.py) can outgrow the GPU, and
    computing every batch's features online made a step 0.64 s instead of ~0.16."""
    wanted = set(index)
    lengths = seqs.lengths()
    room = budget // _token_bytes(n_features, dtype)  # tokens
    kept = []
    for i in generation_order(seqs, seed):
        if i in wanted and int(lengths[i]) <= room:
            kept.append(i)
            room -= int(lengths[i])
    return sorted(kept)


class FeatureStore:
    """Features ``[tokens, n_features]`` of the sequences at ``index``, flat, in ``dtype``
    on the target's device; :meth:`gather` gives a batch's right-padded ``[B, L, F]``.

    ``batch_tokens`` bounds the padded tokens of one target pass while filling it.
    """

    def __init__(self, target: Target, seqs: Sequences, index: Sequence[int],
                 layers: tuple[int, ...], *, dtype: torch.dtype = torch.bfloat16,
                 batch_tokens: int = 65_536, progress: Callable[[str], None] | None = None):
        device = target.device
        lengths = seqs.lengths()
        unique = sorted(set(index), key=lambda i: int(lengths[i]))
        n_features = len(layers) * target.embed.shape[1]
        self.lengths = torch.tensor([int(lengths[i]) for i in unique], device=device)
        offs = np.zeros(len(unique), dtype=np.int64)
        offs[1:] = np.cumsum([int(lengths[i]) for i in unique])[:-1]
        self.offs = torch.from_numpy(offs).to(device)
        self.row = {seq: k for k, seq in enumerate(unique)}
        total = int(sum(int(lengths[i]) for i in unique))
        self.flat = torch.empty((total, n_features), dtype=dtype, device=device)
        done = 0
        k = 0
        while k < len(unique):
            # ascending lengths: a batch's padded width is its last sequence's length
            end = k + 1
            while end < len(unique) and (end - k + 1) * int(lengths[unique[end]]) <= batch_tokens:
                end += 1
            sel = unique[k:end]
            ids, lens = padded_ids(seqs, sel, device)
            feats = target.features(ids, lens, layers)
            for r, seq in enumerate(sel):
                n = int(lengths[seq])
                at = int(offs[self.row[seq]])
                self.flat[at:at + n] = feats[r, :n].to(dtype)
            done += int(lens.sum())
            k = end
            if progress and k % 2048 < len(sel):
                progress(f"[features] {k}/{len(unique)} sequences, {done} tokens")

    def gather(self, index: Sequence[int]) -> torch.Tensor:
        """``[B, L, n_features]`` for the sequences at ``index`` (``L`` the longest), zero
        past each length, as :meth:`Target.features` gives them."""
        rows = torch.tensor([self.row[i] for i in index], device=self.flat.device)
        lens = self.lengths[rows]
        width = int(lens.max())
        at = torch.arange(width, device=self.flat.device)[None]
        inside = at < lens[:, None]
        idx = torch.where(inside, self.offs[rows][:, None] + at, 0)
        return self.flat[idx] * inside[..., None].to(self.flat.dtype)
