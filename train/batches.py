"""Training and evaluation batches: anchors in target-greedy sequences, the draft's view of
each, and the labels.

For a sequence and an anchor ``p`` (a response position), the block is
``[ids[p], MASK × (block_size − 1)]`` at positions ``p … p + block_size − 1``. It sees the
target features of every position before ``p`` and the whole of its own block (non-causal) —
exactly what llama.cpp's draft sees: its KV cache holds the injected context and the block.
Labels are ``ids[p + k]`` at block position ``k ≥ 1`` inside the sequence, −100 elsewhere.
Several anchors of one sequence share one forward pass; each attends only to its own block.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from train.config import DraftConfig
from train.seqs import Sequences
from train.target import Target

IGNORE = -100


@dataclass
class Batch:
    """One forward pass's inputs and labels (``Q`` = anchors × block_size)."""

    ctx: torch.Tensor
    """Target features ``[B, L, n_features]``."""
    ctx_pos: torch.Tensor
    blk: torch.Tensor
    """Block token embeddings ``[B, Q, n_embd]``."""
    blk_pos: torch.Tensor
    mask: torch.Tensor
    """``[B, 1, Q, L + Q]`` bool, True = may attend."""
    labels: torch.Tensor
    """``[B, Q]`` token ids, :data:`IGNORE` where there is nothing to predict."""


def random_anchors(seqs: Sequences, index: Sequence[int], anchors: int,
                   rng: np.random.Generator) -> np.ndarray:
    """``[len(index), anchors]`` anchors drawn uniformly from each sequence's response
    positions ``plen … n − 2`` (the last position has nothing after it)."""
    out = np.zeros((len(index), anchors), dtype=np.int64)
    lengths = seqs.lengths()
    for r, i in enumerate(index):
        lo, hi = int(seqs.plens[i]), int(lengths[i]) - 2
        out[r] = rng.integers(lo, hi + 1, size=anchors) if hi >= lo else max(0, hi)
    return out


def padded_ids(seqs: Sequences, index: Sequence[int],
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids ``[B, L]`` and lengths ``[B]`` of the sequences at ``index``."""
    rows = [seqs.ids(i) for i in index]
    width = max(len(r) for r in rows)
    ids = np.zeros((len(rows), width), dtype=np.int64)
    for r, row in enumerate(rows):
        ids[r, : len(row)] = row
    lengths = torch.tensor([len(r) for r in rows], device=device)
    return torch.from_numpy(ids).to(device), lengths


def make_batch(seqs: Sequences, index: Sequence[int], anchors: np.ndarray, target: Target,
               c: DraftConfig, features: torch.Tensor | None = None) -> Batch:
    """The batch for sequences ``index`` with ``anchors`` ``[B, A]``; ``features`` (from
    :meth:`Target.features` for the same sequences) are computed when not given."""
    device = target.device
    ids, lengths = padded_ids(seqs, index, device)
    if features is None:
        features = target.features(ids, lengths, c.target_layers)
    b, width = ids.shape
    bs = c.block_size
    anc = torch.as_tensor(anchors, device=device)
    q = anc.shape[1] * bs
    offsets = torch.arange(bs, device=device)
    pos = (anc[:, :, None] + offsets).reshape(b, q)
    tokens = torch.full((b, anc.shape[1], bs), c.mask_id, device=device, dtype=torch.long)
    tokens[:, :, 0] = ids.gather(1, anc)
    inside = (pos < lengths[:, None]) & (offsets.repeat(anc.shape[1])[None] >= 1)
    labels = torch.where(inside, ids.gather(1, pos.clamp(max=width - 1)),
                         torch.full_like(pos, IGNORE))
    block_of = torch.arange(q, device=device) // bs
    ctx_vis = torch.arange(width, device=device)[None, None] < anc[:, block_of][:, :, None]
    blk_vis = (block_of[:, None] == block_of[None, :])[None].expand(b, q, q)
    mask = torch.cat([ctx_vis, blk_vis], dim=-1)[:, None]
    return Batch(ctx=features, ctx_pos=torch.arange(width, device=device)[None].expand(b, width),
                 blk=target.embed[tokens.reshape(b, q)], blk_pos=pos, mask=mask, labels=labels)
