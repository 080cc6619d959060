"""Target-greedy continuations of the target loaded in torch, in batches: ``hf``
(transformers' ``generate``) or ``torch`` (:class:`train.fast_decode.Decoder`: a preallocated
cache and a replayed CUDA graph). Which generator yields more tokens per GPU minute is
measured by running them, :mod:`train.gen_stats`.

Prompts are sorted by length and cut into batches of at most ``batch`` prompts and
``batch_tokens`` tokens (prompt width plus ``max_new`` per row: what the KV cache holds), so
little is padded and long agent requests get small batches. Batches are left-padded
and decoded greedily to ``max_new`` tokens; each continuation is cut after its first
end-of-generation token. Batches holding an agent request go first, the others in a seeded
shuffle (a run cut by its budget still covers every kind of prompt;
:func:`generation_batches`). ``json``-protocol
prompts need the server's grammar and are skipped (counted). No new batch starts after
``budget_s`` seconds. Needs only torch, transformers, numpy and gguf (the device image's
packages plus a gguf wheel), not the product's dependencies.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from train.fast_decode import Decoder
from train.gen_stats import MIN_RESPONSE, GenStats
from train.seqs import Sequences, build
from train.target import Target


def _cut(row: list[int], eos: tuple[int, ...]) -> list[int]:
    for k, t in enumerate(row):
        if t in eos:
            return row[: k + 1]
    return row


@torch.no_grad()
def batches(prompts: Sequences, index: list[int], *, batch: int, batch_tokens: int,
            max_new: int) -> list[list[int]]:
    """``index`` sorted by prompt length and cut into batches within both limits."""
    out: list[list[int]] = []
    for i in sorted(index, key=lambda i: int(prompts.plens[i])):
        width = int(prompts.plens[i]) + max_new
        if out and len(out[-1]) < batch and (len(out[-1]) + 1) * width <= batch_tokens:
            out[-1].append(i)
        else:
            out.append([i])
    return out


def generation_batches(prompts: Sequences, *, batch: int, batch_tokens: int,
                       max_new: int) -> tuple[list[list[int]], int]:
    """(the batches in the order :func:`generate` runs them, the ``json``-protocol prompts
    skipped): the batches holding an agent request first, shortest first, then the others in
    a seeded shuffle."""
    usable = [i for i in range(len(prompts)) if prompts.schema(i) is None]
    cut = batches(prompts, usable, batch=batch, batch_tokens=batch_tokens, max_new=max_new)
    agent = [b for b in cut if any(prompts.source(i).startswith("agent-") for i in b)]
    rest = [b for b in cut if b not in agent]
    rest = [rest[k] for k in np.random.default_rng(0).permutation(len(rest))]
    return agent + rest, len(prompts) - len(usable)


def _hf_rows(target: Target, prompts: Sequences, sel: list[int], *, max_new: int,
             pad: int) -> list[list[int]]:
    """transformers' greedy continuations of the prompts ``sel``, left-padded into one
    batch, each cut after its first end-of-generation id."""
    width = max(int(prompts.plens[i]) for i in sel)
    ids = torch.full((len(sel), width), pad, dtype=torch.long)
    mask = torch.zeros((len(sel), width), dtype=torch.long)
    for r, i in enumerate(sel):
        row = torch.from_numpy(prompts.prompt(i))
        ids[r, width - len(row):] = row
        mask[r, width - len(row):] = 1
    gen = target.model.generate(ids.to(target.device), attention_mask=mask.to(target.device),
                                max_new_tokens=max_new, do_sample=False,
                                eos_token_id=list(target.eos_ids) or None, pad_token_id=pad)
    return [_cut(gen[r, width:].tolist(), target.eos_ids) for r in range(len(sel))]


def generate(target: Target, prompts: Sequences, *, max_new: int, batch: int,
             batch_tokens: int = 1_000_000, budget_s: float = float("inf"),
             progress: Callable[[str], None] | None = None,
             engine: str = "hf", attention: str = "auto") -> tuple[Sequences, GenStats, int]:
    """(sequences, stats, prompts skipped for needing a grammar); ``engine`` is ``hf`` or
    ``torch`` (decode steps attending by ``attention``, one of :data:`train.fast_decode.ATTENTION`
    or ``auto``; each progress line then says the batch's rows, width, prefill and decode
    seconds, the attention that ran, what each probed one took a step and when the batch
    dropped its ended rows)."""
    order, skipped = generation_batches(prompts, batch=batch, batch_tokens=batch_tokens,
                                        max_new=max_new)
    usable = len(prompts) - skipped
    pad = target.eos_ids[0] if target.eos_ids else 0
    device = target.device
    decoder = Decoder(target.model, attention=attention) if engine == "torch" else None
    out: dict[int, list[int]] = {}
    graph_said, dropped_said = False, set()
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.monotonic()
    for sel in order:
        if time.monotonic() - started > budget_s:
            break
        if decoder is not None:
            rows = decoder.greedy([prompts.prompt(i) for i in sel], max_new, target.eos_ids)
        else:
            rows = _hf_rows(target, prompts, sel, max_new=max_new, pad=pad)
        out.update(zip(sel, rows, strict=True))
        if decoder is not None and decoder.graph_error and progress and not graph_said:
            graph_said = True
            progress(f"no CUDA graph (decoding eagerly): {decoder.graph_error}")
        for kind in sorted(decoder.dropped.keys() - dropped_said) if decoder and progress else ():
            progress(f"{kind} left out of auto's probes (its step was not captured): "
                     f"{decoder.dropped[kind]}")
            dropped_said.add(kind)
        if progress:
            line = (f"{len(out)}/{usable} prompts, {sum(map(len, out.values()))} tokens, "
                    f"{time.monotonic() - started:.0f} s")
            if decoder is not None and decoder.timing is not None:
                t = decoder.timing
                width = max(int(prompts.plens[i]) for i in sel)
                probed = "".join(f", {k} {ms:.1f}" for k, ms in t.step_ms.items())
                dropped = "".join(f", {n} rows on after step {at}" for at, n in t.compacted)
                line += (f" (batch of {len(sel)} rows, prompts up to {width} tokens: prefill "
                         f"{t.prefill_s:.1f} s, {t.steps} decode steps {t.decode_s:.1f} s by "
                         f"{t.kind}{' (auto still probing)' if t.probing else ''}"
                         f"{f'; ms a step{probed}' if probed else ''}"
                         f"{f'; ended rows dropped{dropped}' if dropped else ''})")
            progress(line)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.monotonic() - started
    keep = [i for i in sorted(out) if len(out[i]) >= MIN_RESPONSE]
    seqs = build([np.concatenate([prompts.prompt(i), np.asarray(out[i], np.int64)])
                  for i in keep], [int(prompts.plens[i]) for i in keep],
                 [prompts.source(i) for i in keep], [bool(prompts.heldout[i]) for i in keep])
    stats = GenStats(engine=engine, sequences=len(seqs), prompt_tokens=int(seqs.plens.sum()),
                     response_tokens=seqs.response_tokens(), seconds=seconds,
                     setting=f"batch {batch}" + (f", attention {attention}" if decoder else ""))
    return seqs, stats, skipped
