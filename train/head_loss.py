"""Cross-entropy through the target's frozen output head, a chunk of rows at a time.

The head maps each block position to the target's whole vocabulary (49,152 for SmolLM2): a
step of 32 sequences × 32 anchors × 16 positions made 0.5 M × 49 k float32 logits (3.2 GB),
and their gradient as much again. Here the logits of ``chunk`` rows exist at a time, in the
forward and again (recomputed) in the backward; the head gets no gradient. Same loss and
gradient as ``F.cross_entropy(hidden @ head.T, labels, reduction="none")``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from train.batches import IGNORE


class _HeadCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, head: torch.Tensor, labels: torch.Tensor,
                chunk: int) -> torch.Tensor:
        losses = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        for s in range(0, hidden.shape[0], chunk):
            logits = (hidden[s:s + chunk] @ head.T).float()
            losses[s:s + chunk] = F.cross_entropy(logits, labels[s:s + chunk],
                                                  ignore_index=IGNORE, reduction="none")
        ctx.save_for_backward(hidden, head, labels)
        ctx.chunk = chunk
        return losses

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        hidden, head, labels = ctx.saved_tensors
        out = torch.empty_like(hidden)
        for s in range(0, hidden.shape[0], ctx.chunk):
            lab = labels[s:s + ctx.chunk]
            valid = lab != IGNORE
            p = (hidden[s:s + ctx.chunk] @ head.T).float().softmax(-1)
            rows = torch.arange(len(lab), device=lab.device)
            p[rows, lab.clamp_min(0)] -= valid.float()
            p *= (grad[s:s + ctx.chunk] * valid)[:, None]
            out[s:s + ctx.chunk] = (p.to(head.dtype) @ head).to(hidden.dtype)
        return out, None, None, None


def head_cross_entropy(hidden: torch.Tensor, head: torch.Tensor, labels: torch.Tensor,
                       chunk: int = 8192) -> torch.Tensor:
    """Per-row cross-entropy ``[N]`` (float32, 0 where ``labels`` is ``IGNORE``) of
    ``hidden`` ``[N, d]`` through the frozen ``head`` ``[V, d]`` (same dtype as ``hidden``)
    against ``labels`` ``[N]``."""
    return _HeadCrossEntropy.apply(hidden, head, labels, chunk)
