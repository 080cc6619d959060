"""Target features computed once per sequence and kept on the device, for training.

Computing them online cost a target forward pass over every sequence of every batch: with
32 sequences of ~850 tokens a step, most of the 0.64 s a step that the first H200 run
measured (train/README.md). The target is frozen, so a sequence's features never change; one
pass over the training set in large length-sorted batches gives them all. 10 M tokens × 3
layers × 576 × bfloat16 is 35 GB: it fits an H200 beside the draft. When it does not fit,
training computes them per batch as before (:func:`store_fits`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
import torch

from train.batches import padded_ids
from train.seqs import Sequences
from train.target import Target


def store_bytes(seqs: Sequences, index: Sequence[int], n_features: int,
                dtype: torch.dtype) -> int:
    """Bytes a :class:`FeatureStore` of the sequences at ``index`` takes."""
    lengths = seqs.lengths()
    tokens = int(sum(int(lengths[i]) for i in set(index)))
    return tokens * n_features * torch.empty((), dtype=dtype).element_size()


def store_fits(need: int, device: torch.device, share: float = 0.6) -> tuple[bool, str]:
    """Whether ``need`` bytes fit in ``share`` of the device's free memory (CUDA) or of the
    available RAM (CPU); (answer, the figures as words)."""
    if device.type == "cuda":
        free = torch.cuda.mem_get_info(device)[0]
    else:  # the stdlib's view of free RAM: the device image's torch stages need no psutil
        free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    words = f"{need / 1e9:.1f} GB of features, {free / 1e9:.1f} GB free on {device.type}"
    return need <= share * free, words


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
