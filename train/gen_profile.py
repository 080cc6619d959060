"""Where the ``torch`` generator's time goes, batch by batch (``python -m train gen-profile``):
prefill and decode seconds of the batches ``generate --engine torch`` runs (numbered in its
order, as its progress lines count them), under each decode attention of
:data:`train.fast_decode.ATTENTION` and ``auto`` side by side, whether all give the same
tokens, and the kernels of a few eager decode steps.

Why: on one H200 (train/README.md, 2026-12-04) the batches holding the long agent prompts
made 2-4 k response tokens/s where the coding batches made 37-44 k: 36-38 s a batch, where
reading their KV cache 512 times should take about 4. Needs torch (the ``train`` extra)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from train.errors import InputError
from train.fast_decode import ATTENTION, Decoder, Timing
from train.hf_gen import generation_batches
from train.seqs import Sequences
from train.target import Target


@dataclass(kw_only=True)
class BatchTiming(Timing):
    """One batch under one decode attention (``auto`` included: ``kind`` then says which one
    it kept): its :class:`train.fast_decode.Timing` and what ran it."""

    batch: int
    rows: int
    width: int
    attention: str
    graph: str | None
    rows_same: int = 0
    """Rows whose tokens were the same under every attention."""


def chosen_batches(prompts: Sequences, numbers: list[int], *, batch: int, batch_tokens: int,
                   max_new: int) -> dict[int, list[int]]:
    """Batch number (1-based, in the generator's order: :func:`train.hf_gen.generation_batches`
    with ``batch``, ``batch_tokens``, ``max_new``) → its prompts' indices, for each of
    ``numbers``. Raises :class:`InputError` for a number past the last batch."""
    order, _ = generation_batches(prompts, batch=batch, batch_tokens=batch_tokens,
                                  max_new=max_new)
    if max(numbers) > len(order):
        raise InputError(f"--batches: these prompts make {len(order)} batches")
    return {n: order[n - 1] for n in numbers}


def profile(target: Target, prompts: Sequences, chosen: dict[int, list[int]], *, steps: int,
            rows: int = 0, kernels: int = 0,
            say: Callable[[str], None] = print) -> tuple[list[BatchTiming], str]:
    """(a :class:`BatchTiming` per batch and attention (``auto`` last), the profiler's table of
    ``kernels`` eager decode steps of the last batch, or "" for none). ``chosen``: from
    :func:`chosen_batches`; each batch runs ``steps`` decode steps with no end of generation,
    on its first ``rows`` rows (0: all)."""
    numbers = list(chosen)
    decoders = {name: Decoder(target.model, attention=name) for name in (*ATTENTION, "auto")}
    out: list[BatchTiming] = []
    for number in numbers:
        ids = [prompts.prompt(i) for i in chosen[number][: rows or None]]
        tokens = {}
        for name, decoder in decoders.items():
            tokens[name] = decoder.greedy(ids, steps + 1, ())
            t = decoder.timing
            out.append(BatchTiming(**vars(t), batch=number, rows=len(ids),
                                   width=max(map(len, ids)), attention=name,
                                   graph=decoder.graph_error))
            probed = "".join(f", {k} {ms:.2f}" for k, ms in t.step_ms.items())
            state = "still probing" if t.probing else f"kept {t.kind}"
            say(f"batch {number} ({len(ids)} rows, prompts up to {out[-1].width} tokens), "
                f"{name}: prefill {t.prefill_s:.3f} s, {t.steps} decode steps "
                f"{t.decode_s:.3f} s = {1000 * t.decode_s / t.steps:.2f} ms a step"
                f"{f' ({state}; probed ms a step{probed})' if probed else ''}"
                f"{f' (no CUDA graph: {decoder.graph_error})' if decoder.graph_error else ''}")
            if target.device.type == "cuda":
                torch.cuda.empty_cache()
        same = sum(len(set(map(tuple, row))) == 1 for row in zip(*tokens.values(), strict=True))
        for timing in out[-len(decoders):]:
            timing.rows_same = same
        say(f"batch {number}: {same} of {len(ids)} rows the same tokens under "
            f"{', '.join(tokens)}")
    if not kernels:
        return out, ""
    eager = Decoder(target.model, graphs=False)
    ids = [prompts.prompt(i) for i in chosen[numbers[-1]][: rows or None]]
    activities = [torch.profiler.ProfilerActivity.CPU]
    cuda = target.device.type == "cuda"
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    started = time.monotonic()
    with torch.profiler.profile(activities=activities) as prof:
        eager.greedy(ids, kernels + 1, ())
    table = prof.key_averages().table(
        sort_by="self_device_time_total" if cuda else "self_cpu_time_total", row_limit=20)
    say(f"batch {numbers[-1]}, eager ({eager.attention}), {kernels} decode steps in "
        f"{time.monotonic() - started:.1f} s under the profiler:\n{table}")
    return out, table
