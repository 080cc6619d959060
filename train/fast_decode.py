"""Batched greedy decoding of a llama target from its own weights, with a preallocated KV
cache and, on CUDA, the decode step replayed from a CUDA graph: the ``torch`` generator.

Why not ``model.generate``: on one H200 transformers' batched generation gave 1,905 response
tokens/s at batch 512 and ~300 ms a step even for a batch of 7 (train/README.md), the cost of
a growing cache and ~30 layers of Python per token. A 135 M-parameter target at batch 1,024
reads ~20 GB of KV a step (~6 ms at the H200's bandwidth): the work is memory-bound, and a
replayed graph of one step leaves nothing else.

Layout of one batch of ``B`` left-padded prompts of width ``W`` and ``max_new`` new tokens:
the cache holds ``S = W + max_new`` columns per row (a few more when ``split`` may run, so
that its equal pieces divide them); row ``b``'s prompt fills columns
``pad[b] … W − 1`` (positions 0 … ``W − pad[b] − 1``), decode step ``t`` writes column
``W + t``. A query sees the columns of its own row from ``pad[b]`` up to its own; padding
queries also see themselves (an all-masked row would turn into NaN and spread through the
cache). The math is transformers' ``LlamaForCausalLM`` (RMSNorm in float32, NEOX rotation
with the model's own ``inv_freq`` and scaling, SiLU FFN, tied or separate head), in the
weights' dtype: float32 gives transformers' own greedy tokens, bfloat16 (the default on CUDA)
is what a GPU run uses.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from train.errors import TrainError


@dataclass
class _Layer:
    attn_norm: torch.Tensor
    wqkv: torch.Tensor
    """``[(n_head + 2 n_head_kv) · head_dim, n_embd]``: q, k, v stacked."""
    wo: torch.Tensor
    ffn_norm: torch.Tensor
    w_gate_up: torch.Tensor
    """``[2 n_ff, n_embd]``: gate then up."""
    w_down: torch.Tensor


ATTENTION = ("bmm", "split", "sdpa")
"""How a decode step attends over the cache (:meth:`Decoder._attend`): ``bmm``, each KV head
multiplied by its group of query heads in two batched matrix products; ``split``, the same
with the second product (weights × V) cut into equal pieces of at most :data:`SPLIT` columns,
summed after;
``sdpa``, torch's ``scaled_dot_product_attention`` with ``enable_gqa``. ``Decoder(attention=
"auto")`` times each on every batch and runs the fastest (``python -m train gen-profile``
compares them side by side)."""

SPLIT = 256
"""Cache columns per piece of ``split``'s weights × V product, at most (the pieces are
equal: the cache gets a few more columns so that they divide it). Why: that product has 3 output
rows (the query heads of one KV head) and 64 columns per (row, KV head), and sums over every
cache column; in one piece a batch of long prompts gives the GPU ~1,000 long serial sums
(362 rows × 3 KV heads at ~4,100 columns: on one H200 such batches took ~70 ms a step if they
ran all 512, where reading their cache takes ~7), in pieces ~18,000 short ones. Not yet
measured on a GPU (train/README.md)."""

PROBE_STEPS = 8
"""Decode steps each attention runs, timed, before ``auto`` keeps the fastest for the batch."""

COMPACT = 0.5
"""A batch drops its ended rows (copies the others' cache into a smaller one) once at most
this share of its rows still runs, with :data:`COMPACT_MIN_STEPS` steps or more left. Why: a
step costs the same for an ended row as for a running one, and the batches of short agent
replies ran 512 steps for the few rows that went on: on one H200 the last four of them made
81-145 k tokens from 362-624 rows each, 44-50 % of the rows running on average (if each ran
all 512 steps)."""

COMPACT_MIN_STEPS = 64
"""Steps that must be left for a compaction (its copy and the step's new CUDA graph cost a
few steps)."""


@dataclass
class Timing:
    """Where one :meth:`Decoder.greedy` call's time went, in seconds (wall clock, the device
    synchronised at each boundary; ``decode_s`` includes capturing the step's CUDA graphs), the
    decode steps it ran, the attention that ran them (after ``auto``'s probes) and each probed
    attention's milliseconds a step (empty without ``auto``)."""

    prefill_s: float
    decode_s: float
    steps: int
    kind: str = ""
    step_ms: dict[str, float] = field(default_factory=dict)
    compacted: list[tuple[int, int]] = field(default_factory=list)
    """(decode steps run, rows left) at each compaction (:data:`COMPACT`)."""
    probing: bool = False
    """``auto`` had not timed every attention when the batch ended: ``kind`` ran its last
    steps but was not chosen."""


class Decoder:
    """Greedy continuations of batches of prompts by the llama ``model`` (a transformers
    ``LlamaForCausalLM``), on the model's device; ``graphs`` False decodes eagerly on CUDA too;
    ``attention``: one of :data:`ATTENTION` for decode steps, or ``auto``: each in turn for
    :data:`PROBE_STEPS` steps of a batch, then the fastest for the rest of it.

    Raises :class:`~train.errors.TrainError` for a model this decoder does not reproduce
    (biases in attention or FFN, another activation than SiLU) or an unknown ``attention``.
    """

    def __init__(self, model: nn.Module, dtype: torch.dtype | None = None, graphs: bool = True,
                 attention: str = "bmm"):
        if attention not in (*ATTENTION, "auto"):
            raise TrainError(f"unknown decode attention {attention!r}: one of "
                             f"{', '.join(ATTENTION)}, auto")
        self.attention = attention
        self._kind = ATTENTION[0] if attention == "auto" else attention
        """The attention :meth:`_attend` runs now."""
        self.timing: Timing | None = None
        """The last :meth:`greedy` call's :class:`Timing`."""
        cfg = model.config
        if getattr(cfg, "attention_bias", False) or getattr(cfg, "mlp_bias", False) or \
                getattr(cfg, "hidden_act", "silu") != "silu":
            raise TrainError("the torch generator runs plain llama targets (no biases, SiLU); "
                             "use --engine hf or server")
        device = model.get_input_embeddings().weight.device
        self.device = device
        self.dtype = dtype or (torch.bfloat16 if device.type == "cuda" else torch.float32)
        self.n_head = cfg.num_attention_heads
        self.n_head_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.n_head
        self.eps = cfg.rms_norm_eps

        def w(t: torch.Tensor) -> torch.Tensor:
            return t.detach().to(self.dtype)

        self.embed = w(model.get_input_embeddings().weight)
        self.head = w(model.get_output_embeddings().weight)
        self.final_norm = w(model.model.norm.weight)
        self.layers = [_Layer(
            attn_norm=w(ly.input_layernorm.weight),
            wqkv=w(torch.cat([ly.self_attn.q_proj.weight, ly.self_attn.k_proj.weight,
                              ly.self_attn.v_proj.weight])),
            wo=w(ly.self_attn.o_proj.weight),
            ffn_norm=w(ly.post_attention_layernorm.weight),
            w_gate_up=w(torch.cat([ly.mlp.gate_proj.weight, ly.mlp.up_proj.weight])),
            w_down=w(ly.mlp.down_proj.weight)) for ly in model.model.layers]
        rotary = model.model.rotary_emb
        self.inv_freq = rotary.inv_freq.detach().float().to(device)
        self.rope_scale = float(getattr(rotary, "attention_scaling", 1.0))
        self.graph_error: str | None = None if graphs else "turned off"
        """Why the decode step could not be captured as a CUDA graph (then it runs eagerly)."""
        self.dropped: dict[str, str] = {}
        """``auto``: the attentions whose step could not be captured (kind → why); the later
        batches probe only the others (eager steps would not be a fair race)."""

    # --- the model ----------------------------------------------------------------------------

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(
            x.dtype)

    def _rope(self, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = pos.float()[..., None] * self.inv_freq
        emb = torch.cat([f, f], dim=-1)[:, :, None, :]
        return ((emb.cos() * self.rope_scale).to(self.dtype),
                (emb.sin() * self.rope_scale).to(self.dtype))

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], dim=-1) * sin

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        """Attention of ``q`` ``[B, T, n_head, hd]`` over cached ``k``/``v``
        ``[B, n_head_kv, keys, hd]``; ``[B, T, n_head, hd]``.

        A decode step (``T = 1``) multiplies each KV head once by its group of query heads:
        SDPA's GQA path would copy the whole cache to ``n_head`` heads every step, and the
        step is bound by reading the cache (``attention="bmm"``); ``"sdpa"`` hands the step
        to ``scaled_dot_product_attention`` with ``enable_gqa`` instead, and ``"split"`` cuts
        the weights × V product into equal pieces of at most :data:`SPLIT` columns (the
        cache's columns are a multiple of their count; where one piece holds them all it is
        ``bmm``). A prefill runs SDPA's fused kernel on the expanded heads, once per batch."""
        b, t, nh, hd = q.shape
        group = nh // self.n_head_kv
        if t == 1 and self._kind == "sdpa":
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k, v,
                                               attn_mask=mask.view(b, 1, 1, -1),
                                               scale=1.0 / math.sqrt(hd), enable_gqa=True)
            return o.transpose(1, 2)
        if t == 1:
            qg = q.view(b, self.n_head_kv, group, hd)
            scores = (qg @ k.transpose(-1, -2)).float() / math.sqrt(hd)
            scores = scores.masked_fill(~mask.view(b, 1, 1, -1), float("-inf"))
            weights = scores.softmax(-1).to(v.dtype)
            keys = k.shape[2]
            pieces = -(-keys // SPLIT)
            # a one-token prefill also comes here, over columns not cut for split
            if self._kind == "bmm" or pieces < 2 or keys % pieces:
                return (weights @ v).view(b, 1, nh, hd)
            size = keys // pieces
            weights = weights.view(b, self.n_head_kv, group, pieces, size).transpose(2, 3)
            o = (weights @ v.view(b, self.n_head_kv, pieces, size, hd)).sum(
                2, dtype=torch.float32)
            return o.to(v.dtype).view(b, 1, nh, hd)
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.repeat_interleave(group, 1),
                                           v.repeat_interleave(group, 1), attn_mask=mask,
                                           scale=1.0 / math.sqrt(hd))
        return o.transpose(1, 2)

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, cache_k: list[torch.Tensor],
                 cache_v: list[torch.Tensor], cols: torch.Tensor, keys: int,
                 mask: torch.Tensor) -> torch.Tensor:
        """Final hidden states ``[B, T, n_embd]`` of ``ids`` ``[B, T]`` at positions ``pos``;
        their K/V go to cache columns ``cols`` ``[T]``, attention runs over the first
        ``keys`` columns under ``mask`` ``[B, 1, T, keys]``."""
        b, t = ids.shape
        nh, nkv, hd = self.n_head, self.n_head_kv, self.head_dim
        h = self.embed[ids]
        cos, sin = self._rope(pos)
        for ly, ck, cv in zip(self.layers, cache_k, cache_v, strict=True):
            x = self._norm(h, ly.attn_norm)
            q, k, v = (x @ ly.wqkv.T).split([nh * hd, nkv * hd, nkv * hd], dim=-1)
            q = self._rotate(q.view(b, t, nh, hd), cos, sin)
            k = self._rotate(k.view(b, t, nkv, hd), cos, sin)
            ck.index_copy_(2, cols, k.transpose(1, 2))
            cv.index_copy_(2, cols, v.view(b, t, nkv, hd).transpose(1, 2))
            o = self._attend(q, ck[:, :, :keys], cv[:, :, :keys], mask)
            h = h + o.reshape(b, t, nh * hd) @ ly.wo.T
            gate, up = (self._norm(h, ly.ffn_norm) @ ly.w_gate_up.T).chunk(2, dim=-1)
            h = h + (F.silu(gate) * up) @ ly.w_down.T
        return self._norm(h, self.final_norm)

    # --- a batch ------------------------------------------------------------------------------

    @torch.no_grad()
    def greedy(self, prompts: list[np.ndarray], max_new: int, eos: tuple[int, ...],
               prefill_tokens: int = 65_536, check_every: int = 16, compact: float = COMPACT,
               compact_min_steps: int = COMPACT_MIN_STEPS) -> list[list[int]]:
        """The greedy continuation of each prompt, cut after its first ``eos`` id (at most
        ``max_new`` ids). ``prefill_tokens`` bounds the prompt tokens run at once (the
        prefill mask is ``rows × W × W`` booleans); every ``check_every`` steps the batch
        stops once every row has ended, and drops its ended rows once at most ``compact``
        of them run with ``compact_min_steps`` steps left (0: never; not while ``auto``
        probes). The tokens are the same either way. :attr:`timing` says where the time
        went."""
        dev = self.device
        started = self._now()
        b = len(prompts)
        width = max(len(p) for p in prompts)
        kinds = [k for k in ATTENTION if k not in self.dropped] if self.attention == "auto" \
            else [self.attention]
        # split's pieces are equal, of at most SPLIT columns: a few more columns make them
        # divide the cache (masked, like every column a step has not reached)
        s = width + max_new
        if "split" in kinds:
            pieces = -(-s // SPLIT)
            s = -(-s // pieces) * pieces
        ids = torch.zeros((b, width), dtype=torch.long)
        pad = torch.tensor([width - len(p) for p in prompts], dtype=torch.long)
        for r, p in enumerate(prompts):
            ids[r, width - len(p):] = torch.from_numpy(np.asarray(p, dtype=np.int64))
        ids, pad = ids.to(dev), pad.to(dev)
        shape = (b, self.n_head_kv, s, self.head_dim)
        # zeros, not empty: a masked column still enters the product with V (0 · NaN = NaN)
        cache_k = [torch.zeros(shape, dtype=self.dtype, device=dev) for _ in self.layers]
        cache_v = [torch.zeros(shape, dtype=self.dtype, device=dev) for _ in self.layers]
        col = torch.arange(s, device=dev)
        first = torch.empty(b, dtype=torch.long, device=dev)
        rows = max(1, min(b, prefill_tokens // width, (1 << 27) // (width * width)))
        for r0 in range(0, b, rows):
            r1 = min(b, r0 + rows)
            p = pad[r0:r1]
            q = col[:width]
            mask = ((q[None, None, None, :] >= p[:, None, None, None])
                    & (q[None, None, None, :] <= q[None, None, :, None])) \
                | (q[None, None, None, :] == q[None, None, :, None])
            pos = (q[None, :] - p[:, None]).clamp_min(0)
            hidden = self._forward(ids[r0:r1], pos, [c[r0:r1] for c in cache_k],
                                   [c[r0:r1] for c in cache_v], q, width, mask)
            first[r0:r1] = (hidden[:, -1] @ self.head.T).argmax(-1)
        out = torch.empty((b, max_new), dtype=torch.long, device=dev)
        out[:, 0] = first
        final = out  # every row's tokens; ``out`` holds the running rows' after a compaction
        where = torch.arange(b, device=dev)  # the row of ``final`` each running row is
        prefilled = self._now()
        steps = 0
        eos_t = torch.tensor(eos or (-1,), device=dev)
        done = torch.isin(first, eos_t)
        tok = first[:, None].clone()
        step = torch.zeros((), dtype=torch.long, device=dev)
        base = (width - pad)[:, None]

        def one_step() -> None:
            at = width + step
            mask = ((col >= pad[:, None]) & (col <= at))[:, None, None, :]
            hidden = self._forward(tok, base + step, cache_k, cache_v, at.view(1), s, mask)
            nxt = (hidden[:, -1] @ self.head.T).argmax(-1)
            out.index_copy_(1, (step + 1).view(1), nxt[:, None])
            tok.copy_(nxt[:, None])
            done.logical_or_(torch.isin(nxt, eos_t))

        def capture(kinds: list[str], again: bool = False) -> dict[str, torch.cuda.CUDAGraph]:
            """A graph of the step per kind that captures; ``again`` after a compaction,
            where a failure (an OOM, say) costs only the rest of this batch its graph."""
            graphs, errors = {}, {}
            if dev.type != "cuda" or max_new <= 1 or self.graph_error is not None:
                return graphs
            for kind in kinds:
                self._kind = kind
                try:
                    graphs[kind] = self._capture(one_step, step, done, tok, out)
                except RuntimeError as exc:
                    errors[kind] = str(exc).splitlines()[0]
            if again:
                return graphs
            if not graphs:  # run on without graphs: slower, the same tokens
                self.graph_error = "; ".join(f"{k}: {e}" for k, e in errors.items())
            else:
                self.dropped.update(errors)
            return graphs

        graphs = capture(kinds)
        if graphs:
            kinds = [k for k in kinds if k in graphs]
        # auto: each attention runs PROBE_STEPS timed steps, then the fastest the rest
        probes = list(kinds) if len(kinds) > 1 else []
        step_ms: dict[str, float] = {}
        compacted: list[tuple[int, int]] = []
        self._kind = probes[0] if probes else kinds[0]
        mark, probe_from = self._now() if probes else 0.0, 0
        ran = self._kind
        for t in range(max_new - 1):
            step.fill_(t)
            if self._kind in graphs:
                graphs[self._kind].replay()
            else:
                one_step()
            steps, ran = t + 1, self._kind
            if probes and steps - probe_from == PROBE_STEPS:
                now = self._now()
                step_ms[probes.pop(0)] = 1000 * (now - mark) / PROBE_STEPS
                mark, probe_from = now, steps
                self._kind = probes[0] if probes else min(step_ms, key=step_ms.__getitem__)
            if (t + 1) % check_every:
                continue
            running = int((~done).sum())
            if not running:
                break
            if compact and not probes and running <= compact * len(where) \
                    and running < len(where) and max_new - 2 - t >= compact_min_steps:
                # the running rows' cache, tokens and state into a batch of their own; the
                # graphs go first, so their memory and the old cache are freed
                keep = (~done).nonzero().squeeze(1)
                if out is not final:
                    final.index_copy_(0, where, out)
                graphs.clear()
                where, out, tok, done = where[keep], out[keep], tok[keep], done[keep]
                pad, base = pad[keep], base[keep]
                for layer in range(len(cache_k)):  # a layer at a time: the peak is one more
                    cache_k[layer] = cache_k[layer][keep]
                    cache_v[layer] = cache_v[layer][keep]
                graphs = capture([self._kind], again=True)
                compacted.append((steps, running))
        if out is not final:
            final.index_copy_(0, where, out)
        rows_out = final[:, : steps + 1].cpu().tolist()
        self.timing = Timing(prefill_s=prefilled - started, decode_s=self._now() - prefilled,
                             steps=steps, kind=ran, step_ms=step_ms, compacted=compacted,
                             probing=bool(probes))
        eos_set = set(eos)
        cut: list[list[int]] = []
        for row in rows_out:
            end = next((k + 1 for k, x in enumerate(row) if x in eos_set), len(row))
            cut.append(row[:end])
        return cut

    def _now(self) -> float:
        """Seconds on a monotonic clock, once the device has finished what it was given."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.monotonic()

    @staticmethod
    def _capture(one_step, step: torch.Tensor, done: torch.Tensor, tok: torch.Tensor,
                 out: torch.Tensor) -> torch.cuda.CUDAGraph:
        """``one_step`` as a CUDA graph. The warm-up runs write the cache at the last
        column and ``out``'s last column, which the real last step overwrites before any
        query can see them; ``done`` and ``tok`` are restored."""
        saved = done.clone(), tok.clone()
        step.fill_(out.shape[1] - 2)
        try:
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    one_step()
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                one_step()
        finally:  # a failed capture too: the next attention or the eager steps go on from here
            done.copy_(saved[0])
            tok.copy_(saved[1])
        return graph
