"""Chat requests → a prompt set: token ids from the server's own chat template.

Each request's prompt text comes from ``/apply-template`` and its ids from ``/tokenize``
(:mod:`train.llama`), so the ids are the ones the product's requests decode from. A prompt set
is a :class:`~train.seqs.Sequences` whose every ``plen`` is the whole sequence. Held out: the
requests flagged so (a held-out agent session), and coding prompts by
:func:`~train.seqs.heldout_by_hash`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from train import llama
from train.requests import ChatRequest
from train.seqs import Sequences, build, heldout_by_hash


def render(base_url: str, requests: Sequence[ChatRequest], *, max_prompt: int,
           workers: int = 4,
           progress: Callable[[str], None] | None = None) -> tuple[Sequences, int]:
    """(prompt set, number dropped for being longer than ``max_prompt`` tokens)."""

    def one(request: ChatRequest) -> list[int]:
        return llama.tokenize(base_url, llama.apply_template(base_url, request))

    rendered: list[list[int]] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for ids in pool.map(one, requests):
            rendered.append(ids)
            if progress and len(rendered) % 2000 == 0:
                progress(f"rendered {len(rendered)}/{len(requests)}")
    keep = [(r, ids) for r, ids in zip(requests, rendered, strict=True)
            if 0 < len(ids) <= max_prompt]
    heldout = [r.heldout or (r.source.startswith("coding:") and heldout_by_hash(ids))
               for r, ids in keep]
    if progress:
        progress(f"rendered {len(keep)} prompts ({sum(heldout)} held out), "
                 f"{len(requests) - len(keep)} longer than {max_prompt} tokens dropped")
    prompts = build([ids for _, ids in keep], [len(ids) for _, ids in keep],
                    [r.source for r, _ in keep], heldout, [r.schema for r, _ in keep])
    return prompts, len(requests) - len(keep)
