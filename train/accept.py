"""Torch-side acceptance: greedy speculative decoding replayed along target-greedy sequences.

From ``p = plen`` the draft proposes ``block_size − 1`` tokens for the block at ``p``; the
accepted count is the longest prefix equal to the sequence's own next tokens (the target's
greedy choice), and decoding moves on to ``p + accepted + 1``, as llama-server does at
temperature 0. A proposal past the sequence's end is not accepted. The target's features of a
group of sequences are computed once and reused for every block of the group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from train.batches import make_batch, padded_ids
from train.draft import Draft
from train.seqs import Sequences
from train.target import Target


@dataclass
class Acceptance:
    """Accepted tokens over the blocks drafted."""

    blocks: int = 0
    accepted: int = 0
    drafted: int = 0
    histogram: list[int] = field(default_factory=list)
    """Blocks by accepted count, 0 … block_size − 1."""

    @property
    def per_block(self) -> float:
        """Mean accepted tokens per drafted block."""
        return self.accepted / self.blocks if self.blocks else 0.0

    @property
    def zero_share(self) -> float:
        """Share of blocks that accepted nothing."""
        return self.histogram[0] / self.blocks if self.blocks else 0.0

    @property
    def rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def as_dict(self) -> dict:
        return asdict(self) | {"per_block": round(self.per_block, 4),
                               "zero_share": round(self.zero_share, 4),
                               "rate": round(self.rate, 4)}

    def line(self) -> str:
        return (f"{self.per_block:.3f} tokens accepted per {len(self.histogram) - 1}-token "
                f"block over {self.blocks} blocks, {self.zero_share:.1%} accept nothing "
                f"({self.accepted}/{self.drafted} = {self.rate:.2%} of drafts)")


@torch.no_grad()
def acceptance(draft: Draft, target: Target, seqs: Sequences, index: Sequence[int], *,
               group: int = 32, max_blocks: int | None = None) -> Acceptance:
    """Acceptance of ``draft`` along the sequences at ``index``; ``max_blocks`` caps the
    blocks drafted per sequence (the first ones of its response)."""
    c = draft.config
    bs = c.block_size
    result = Acceptance(histogram=[0] * bs)
    was_training = draft.training
    draft.eval()
    head = target.head
    for start in range(0, len(index), group):
        sel = list(index[start:start + group])
        ids, lengths = padded_ids(seqs, sel, target.device)
        feats = target.features(ids, lengths, c.target_layers)
        ids_np = ids.cpu().numpy()
        p = np.asarray([int(seqs.plens[i]) for i in sel], dtype=np.int64)
        n = lengths.cpu().numpy()
        drafted = np.zeros(len(sel), dtype=np.int64)
        while True:
            active = p < n - 1
            if max_blocks is not None:
                active &= drafted < max_blocks
            live = np.flatnonzero(active)
            if live.size == 0:
                break
            anchors = p[live][:, None]
            batch = make_batch(seqs, [sel[r] for r in live], anchors, target, c,
                               features=feats[torch.from_numpy(live).to(feats.device),
                                              : int(n[live].max())])
            with torch.autocast("cuda", dtype=torch.bfloat16,
                                enabled=target.device.type == "cuda"):
                hidden = draft(batch.ctx, batch.ctx_pos, batch.blk, batch.blk_pos, batch.mask)
            pred = (hidden @ head.T.to(hidden.dtype)).argmax(-1).cpu().numpy()
            for k, r in enumerate(live):
                a = 0
                for i in range(1, bs):
                    at = p[r] + i
                    if at < n[r] and pred[k, i] == ids_np[r, at]:
                        a += 1
                    else:
                        break
                result.histogram[a] += 1
                result.accepted += a
                result.blocks += 1
                result.drafted += bs - 1
                p[r] += a + 1
                drafted[r] += 1
    draft.train(was_training)
    return result
