"""The DFlash draft in torch, mirroring llama.cpp b11434's ``dflash`` graph
(``src/models/dflash.cpp``, graph<false>; shared/dflash/README.md):

- context: ``g = enc.output_norm(fc(features))``; per layer K = rope(k_norm(wk·g)), V = wv·g
  (no attn_norm on the context);
- block: ``h = embed([id_last, MASK × (block_size − 1)])`` at positions ``p … p + 15``; per
  layer attn_norm, q/k/v, q_norm/k_norm, NEOX RoPE, **non-causal** attention over context +
  block, residual, ffn_norm, SiLU FFN, residual;
- logits: ``output_norm(h)`` through the target's head; drafts are the argmax at block
  positions 1..15.

Parameter names are the GGUF tensor names (``fc.weight``, ``blk.0.attn_q.weight``…), so
:meth:`Draft.weights` is what :func:`train.export.export_gguf` writes.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from train.config import DraftConfig

OUTPUT_NORM_INIT = 0.1
"""At 1.0 the untrained block predicts its own token with logit ~75 (first loss 70–100)."""


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight.to(x.dtype)


def _linear(n_in: int, n_out: int) -> nn.Linear:
    return nn.Linear(n_in, n_out, bias=False)


class Layer(nn.Module):
    """One draft layer (``blk.N``)."""

    def __init__(self, c: DraftConfig):
        super().__init__()
        d, hd = c.n_embd, c.head_dim
        self.n_head, self.n_head_kv, self.head_dim = c.n_head, c.n_head_kv, hd
        self.attn_norm = RMSNorm(d, c.eps)
        self.attn_q = _linear(d, c.n_head * hd)
        self.attn_k = _linear(d, c.n_head_kv * hd)
        self.attn_v = _linear(d, c.n_head_kv * hd)
        self.attn_output = _linear(c.n_head * hd, d)
        self.attn_q_norm = RMSNorm(hd, c.eps)
        self.attn_k_norm = RMSNorm(hd, c.eps)
        self.ffn_norm = RMSNorm(d, c.eps)
        self.ffn_gate = _linear(d, c.n_ff)
        self.ffn_up = _linear(d, c.n_ff)
        self.ffn_down = _linear(c.n_ff, d)


class Encoder(nn.Module):
    """``enc.output_norm``: the norm after ``fc`` on the context features."""

    def __init__(self, c: DraftConfig):
        super().__init__()
        self.output_norm = RMSNorm(c.n_embd, c.eps)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """NEOX rotation (HF ``rotate_half``) of ``x`` ``[B, T, heads, head_dim]``."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin


class Draft(nn.Module):
    """The draft; :meth:`forward` gives the final hidden state, :meth:`logits` the head's."""

    def __init__(self, c: DraftConfig):
        super().__init__()
        self.config = c
        self.fc = _linear(len(c.target_layers) * c.n_embd, c.n_embd)
        self.enc = Encoder(c)
        self.blk = nn.ModuleList(Layer(c) for _ in range(c.n_layer))
        self.output_norm = RMSNorm(c.n_embd, c.eps)
        inv = 1.0 / (c.rope_base ** (torch.arange(0, c.head_dim, 2, dtype=torch.float64)
                                     / c.head_dim))
        self.register_buffer("inv_freq", inv.float(), persistent=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
        with torch.no_grad():
            self.output_norm.weight.fill_(OUTPUT_NORM_INIT)

    def _cos_sin(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = pos.float()[..., None] * self.inv_freq
        emb = torch.cat([f, f], dim=-1)[:, :, None, :]
        return emb.cos(), emb.sin()

    def forward(self, ctx: torch.Tensor, ctx_pos: torch.Tensor, blk: torch.Tensor,
                blk_pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Hidden states ``[B, Q, n_embd]`` after ``output_norm``.

        ``ctx`` ``[B, L, n_features]`` target features at positions ``ctx_pos`` ``[B, L]``;
        ``blk`` ``[B, Q, n_embd]`` block token embeddings at ``blk_pos`` ``[B, Q]``; ``mask``
        ``[B, 1, Q, L + Q]`` bool, True where a block position may attend.
        """
        b, n_ctx, _ = ctx.shape
        q_len = blk.shape[1]
        g = self.enc.output_norm(self.fc(ctx.to(self.fc.weight.dtype)))
        cc, sc = self._cos_sin(ctx_pos)
        cq, sq = self._cos_sin(blk_pos)
        h = blk
        for ly in self.blk:
            x = ly.attn_norm(h)
            q = ly.attn_q_norm(ly.attn_q(x).view(b, q_len, ly.n_head, ly.head_dim))
            kb = ly.attn_k_norm(ly.attn_k(x).view(b, q_len, ly.n_head_kv, ly.head_dim))
            vb = ly.attn_v(x).view(b, q_len, ly.n_head_kv, ly.head_dim)
            kc = ly.attn_k_norm(ly.attn_k(g).view(b, n_ctx, ly.n_head_kv, ly.head_dim))
            vc = ly.attn_v(g).view(b, n_ctx, ly.n_head_kv, ly.head_dim)
            q, kb, kc = _rope(q, cq, sq), _rope(kb, cq, sq), _rope(kc, cc, sc)
            # heads expanded by hand: SDPA's GQA path with a mask has no fused kernel and
            # falls back to materialising every score
            group = ly.n_head // ly.n_head_kv
            k = torch.cat([kc, kb], 1).transpose(1, 2).repeat_interleave(group, 1)
            v = torch.cat([vc, vb], 1).transpose(1, 2).repeat_interleave(group, 1)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=mask,
                                               scale=1.0 / math.sqrt(ly.head_dim))
            h = h + ly.attn_output(o.transpose(1, 2).reshape(b, q_len, ly.n_head * ly.head_dim))
            y = ly.ffn_norm(h)
            h = h + ly.ffn_down(F.silu(ly.ffn_gate(y)) * ly.ffn_up(y))
        return self.output_norm(h)

    def weights(self) -> dict[str, np.ndarray]:
        """Every tensor under its GGUF name, float32 numpy (``(out, in)`` = ggml
        ``{in, out}``)."""
        return {k: v.detach().float().cpu().numpy() for k, v in self.state_dict().items()}

    def load_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Load tensors named as :meth:`weights` gives them (e.g. an exported draft's)."""
        self.load_state_dict({k: torch.from_numpy(np.array(v, dtype=np.float32))
                              for k, v in weights.items()})
