"""The per-request controllers behind one face: which servers take their draft length per
request, and what chooses it for each request there (:class:`DraftCap` for the tuned ``dflash``
profile, :class:`NgramGuard` for n-gram lookup)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

from backend.engine.sources import PER_REQUEST_DRAFT_CAP
from backend.serve.profiles import LaunchPlan
from backend.serve.speculation.draft_cap import DraftCap
from backend.serve.speculation.ngram_guard import NgramGuard


@runtime_checkable
class RequestControl(Protocol):
    """What the agent's client asks of a per-request controller: the length each request
    carries (``speculative.n_max``; 0 = no drafting), each answered request's timings, and
    storing what the session learnt when a task ends."""

    def next_n_max(self) -> int:
        """The length the next request carries."""
        ...

    def observe(self, n_max: int, timings: dict | None) -> None:
        """Take one answered request: the length it carried and the server's timings."""
        ...

    def save(self) -> None:
        """Store what the session observed (raises ``TuningError`` when it cannot)."""
        ...


def per_request_cap(plan: LaunchPlan) -> bool:
    """True when a server of ``plan`` takes its draft length per request: the tuned ``dflash``
    profile with a draft (loaded: not a length of 0), on an engine the product built with the
    per-request draft cap patch: the ``engine.json`` beside its ``bin/`` lists
    :data:`~backend.engine.sources.PER_REQUEST_DRAFT_CAP` (the manifest describes that binary,
    also when another home registered it as its ``system`` engine).

    Not ``dflash+ngram``: the cap limits every drafter of the request, so a length chosen for
    the draft model would also cut the n-gram drafts (48-64 tokens of copied text) that are
    that profile's point. Not another ``llama-server``: the product cannot tell whether it
    honours the field (upstream b11434 ignores it; BeeLlama <= 0.3 honours it and sizes drafts
    itself: :func:`backend.serve.tuning.tune`)."""
    if plan.profile != "dflash" or plan.draft is None or plan.draft_n_max == 0:
        return False
    return takes_length_per_request(plan.binary)


def takes_length_per_request(binary: Path) -> bool:
    """True when ``binary`` was built by the product with the per-request draft cap patch:
    the ``engine.json`` beside its ``bin/`` lists
    :data:`~backend.engine.sources.PER_REQUEST_DRAFT_CAP`."""
    try:
        manifest = json.loads((binary.parent.parent / "engine.json").read_text("utf-8"))
    except (OSError, ValueError):
        return False
    patches = manifest.get("patches") if isinstance(manifest, dict) else None
    return isinstance(patches, list) and PER_REQUEST_DRAFT_CAP in patches


def request_control(plan: LaunchPlan, note: Callable[[str], None] | None = None,
                    temperature: float | None = None) -> DraftCap | NgramGuard | None:
    """What chooses each request's draft length on a server of ``plan``: a :class:`DraftCap`
    for the tuned ``dflash`` profile (:func:`per_request_cap`; for requests sampled at
    ``temperature``), an :class:`~backend.serve.speculation.ngram_guard.NgramGuard` for
    ``ngram`` on an engine with the patch (``ngram-fixed`` is the untouched reference), None
    elsewhere (the launch's length)."""
    if per_request_cap(plan):
        return DraftCap(plan, note, temperature)
    if plan.profile == "ngram" and takes_length_per_request(plan.binary):
        return NgramGuard(plan, note)
    return None
