"""Target-greedy continuations from transformers, in batches (the other generator; which one
yields more tokens per GPU minute is measured by running both, :mod:`train.gen_stats`).

Prompts are sorted by length and cut into batches of ``batch`` (little padding), left-padded,
and decoded greedily to ``max_new`` tokens; each continuation is cut after its first
end-of-generation token. ``json``-protocol prompts need the server's grammar and are skipped
(counted). No new batch starts after ``budget_s`` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from train.gen_stats import GenStats
from train.seqs import Sequences, build
from train.server_gen import MIN_RESPONSE
from train.target import Target


def _cut(row: list[int], eos: tuple[int, ...]) -> list[int]:
    for k, t in enumerate(row):
        if t in eos:
            return row[: k + 1]
    return row


@torch.no_grad()
def generate(target: Target, prompts: Sequences, *, max_new: int, batch: int,
             budget_s: float = float("inf"),
             progress: Callable[[str], None] | None = None) -> tuple[Sequences, GenStats, int]:
    """(sequences, stats, prompts skipped for needing a grammar)."""
    usable = [i for i in range(len(prompts)) if prompts.schema(i) is None]
    skipped = len(prompts) - len(usable)
    order = sorted(usable, key=lambda i: int(prompts.plens[i]))
    pad = target.eos_ids[0] if target.eos_ids else 0
    device = target.device
    out: dict[int, list[int]] = {}
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.monotonic()
    for start in range(0, len(order), batch):
        if time.monotonic() - started > budget_s:
            break
        sel = order[start:start + batch]
        width = max(int(prompts.plens[i]) for i in sel)
        ids = torch.full((len(sel), width), pad, dtype=torch.long)
        mask = torch.zeros((len(sel), width), dtype=torch.long)
        for r, i in enumerate(sel):
            row = torch.from_numpy(prompts.prompt(i))
            ids[r, width - len(row):] = row
            mask[r, width - len(row):] = 1
        gen = target.model.generate(ids.to(device), attention_mask=mask.to(device),
                                    max_new_tokens=max_new, do_sample=False,
                                    eos_token_id=list(target.eos_ids) or None,
                                    pad_token_id=pad)
        for r, i in enumerate(sel):
            out[i] = _cut(gen[r, width:].tolist(), target.eos_ids)
        if progress:
            progress(f"{len(out)}/{len(order)} prompts, {sum(map(len, out.values()))} tokens, "
                     f"{time.monotonic() - started:.0f} s")
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.monotonic() - started
    keep = [i for i in sorted(out) if len(out[i]) >= MIN_RESPONSE]
    seqs = build([np.concatenate([prompts.prompt(i), np.asarray(out[i], np.int64)])
                  for i in keep], [int(prompts.plens[i]) for i in keep],
                 [prompts.source(i) for i in keep], [bool(prompts.heldout[i]) for i in keep])
    stats = GenStats(engine="hf", sequences=len(seqs), prompt_tokens=int(seqs.plens.sum()),
                     response_tokens=seqs.response_tokens(), seconds=seconds,
                     setting=f"batch {batch}")
    return seqs, stats, skipped
