"""Target-greedy continuations from a real ``llama-server`` with many slots.

Requests go out ``parallel`` at a time (one per slot; the server batches them continuously)
as ``/completion`` calls from the prompt's token ids, greedy, with the generated ids returned
as sampled (:func:`train.llama.complete_ids`). A ``json``-protocol prompt decodes under its JSON
schema, as the agent's request would. Prompts go in :func:`~train.seqs.generation_order`; no
new request starts after ``budget_s`` seconds, those running finish. A prompt the slot's
context cannot hold is skipped and counted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

import numpy as np

from train import llama
from train.gen_stats import MIN_RESPONSE, GenStats
from train.seqs import Sequences, build, generation_order


def generate(base_url: str, prompts: Sequences, *, max_new: int, parallel: int,
             budget_s: float = float("inf"), log_every_s: float = 30.0,
             progress: Callable[[str], None] | None = None) -> tuple[Sequences, GenStats]:
    """(sequences, stats): each prompt followed by the server's greedy continuation."""
    done: dict[int, list[int]] = {}
    too_long = 0
    started = time.monotonic()
    last_log = started
    todo = iter(generation_order(prompts))
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        running: dict[Future, int] = {}

        def submit() -> bool:
            if time.monotonic() - started > budget_s:
                return False
            i = next(todo, None)
            if i is None:
                return False
            running[pool.submit(llama.complete_ids, base_url, prompts.prompt(i).tolist(),
                                max_new, prompts.schema(i))] = i
            return True

        while len(running) < parallel and submit():
            pass
        while running:
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                i = running.pop(future)
                try:
                    done[i] = future.result()
                except llama.TooLong:
                    too_long += 1
                submit()
            if progress and time.monotonic() - last_log > log_every_s:
                last_log = time.monotonic()
                tokens = sum(len(v) for v in done.values())
                progress(f"{len(done)}/{len(prompts)} prompts, {tokens} tokens, "
                         f"{last_log - started:.0f} s")
    seconds = time.monotonic() - started
    if too_long and progress:
        progress(f"{too_long} prompts skipped: longer than a slot's context")
    keep = [i for i in sorted(done) if len(done[i]) >= MIN_RESPONSE]
    seqs = build([np.concatenate([prompts.prompt(i), np.asarray(done[i], np.int64)])
                  for i in keep], [int(prompts.plens[i]) for i in keep],
                 [prompts.source(i) for i in keep], [bool(prompts.heldout[i]) for i in keep],
                 [prompts.schema(i) for i in keep])
    stats = GenStats(engine="server", sequences=len(seqs), prompt_tokens=int(seqs.plens.sum()),
                     response_tokens=seqs.response_tokens(), seconds=seconds,
                     setting=f"-np {parallel}")
    return seqs, stats
