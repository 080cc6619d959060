"""Never slower with n-gram lookup: per request, drafting off while it measured slower than plain
decoding on this server's own traffic, and back on when a probe says it pays again.

Why. n-gram lookup pays on text that repeats the context (a file written out again: 1.79x on
the bench's edit set on the 2-core CPU) and costs on text it cannot predict: on the agent's own
turns as a capable model writes them (forced replay, benchmarks/RESULTS.md) it ran at 0.87-0.90x
of plain decoding on that CPU, where each drafted token costs a good share of a plain step. Which
of the two a session is, only its traffic tells, and it may change between tasks.

How. On an engine that takes its draft length per request (the product's b11434 build:
``backend/engine/patches/b11434-per-request-draft-cap.patch``; ``speculative.n_max`` 0 takes a
request out of drafting, every drafter included), each request's decode rate (``predicted_n`` /
``predicted_ms``, prefill excluded) is taken with drafting on or off. Plain decoding's rate does
not depend on what is decoded, only on the context, so a few requests off give the reference;
drafting's rate depends on the text, so it is the mean over the recent requests that drafted.
Drafting stays on while that mean is at least the plain one: requests alternate modes on a fixed
schedule (:data:`REFERENCE_EVERY`, :data:`PROBE_EVERY`), so both rates stay current as the
context grows and the traffic changes, and the cost of looking is one request in that many.
Nothing is stored: a session starts with drafting on.

Decision rule, not a prediction: BeeLlama's ``profit`` controller (``--spec-dm-*``) compares
speculative throughput with a periodically re-measured no-spec baseline the same way, inside
the server; this does it from outside, for an engine that has no such controller.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from backend.serve.profiles import LaunchPlan

REFERENCE_EVERY = 6
"""While drafting is on, one request in this many decodes plain, to re-measure plain decoding's
rate at the current context (it falls as the context grows)."""

PROBE_EVERY = 4
"""While drafting is off, one request in this many drafts, to see whether it pays now."""

WINDOW = 6
"""Requests of each mode whose rates the decision is taken over (the newest win)."""

MIN_TOKENS = 32
"""A request that decoded fewer tokens says too little of a rate and is left out (its rate is
mostly the first token's and the stop's overhead)."""

NGRAM_DEFAULT_N_MAX = 64
"""llama.cpp's ngram-mod n_max (common/common.h), the longest a request drafts on a server whose
preset sets no lengths."""


class NgramGuard:
    """The draft length of each request to an n-gram lookup server that takes it per request:
    the server's own (``longest``) while drafting pays, 0 while it does not.

    Same face as :class:`backend.serve.tuning.DraftCap` (``next_n_max``, ``observe``, ``save``),
    so the agent's client carries either. ``note`` is told when drafting turns off or on, with
    the two rates that decided it.
    """

    def __init__(self, plan: LaunchPlan, note: Callable[[str], None] | None = None):
        lengths = plan.options.ngram
        self.longest = lengths.n_max if lengths is not None else NGRAM_DEFAULT_N_MAX
        self.note = note
        self.on = True
        self._sent = 0
        self._rates: dict[bool, deque[tuple[int, float]]] = {
            True: deque(maxlen=WINDOW), False: deque(maxlen=WINDOW)}

    def next_n_max(self) -> int:
        """The length the next request carries (``speculative.n_max``; 0 = no drafting). The
        second request of a session is the first plain one, so a decision can come after two."""
        self._sent += 1
        if self.on:
            plain = self._sent == 2 or self._sent % REFERENCE_EVERY == 0
            return 0 if plain else self.longest
        return self.longest if self._sent % PROBE_EVERY == 0 else 0

    def observe(self, n_max: int, timings: dict | None) -> None:
        """Take one answered request: ``n_max`` the length it carried, ``timings`` the server's
        (``predicted_n``, ``predicted_ms``). A request with too few tokens or unusable timings
        is left out; a decision is taken once both modes have a rate."""
        if not isinstance(timings, dict):
            return
        try:
            tokens = int(timings.get("predicted_n") or 0)
            ms = float(timings.get("predicted_ms") or 0.0)
        except (TypeError, ValueError):
            return  # malformed timings are not evidence either way
        if tokens < MIN_TOKENS or not ms > 0:
            return
        self._rates[n_max > 0].append((tokens, ms))
        drafting, plain = self.rate(True), self.rate(False)
        if drafting is None or plain is None:
            return
        pays = drafting >= plain
        if pays != self.on:
            self.on = pays
            if self.note is not None:
                state = "on" if pays else "off"
                self.note(f"n-gram lookup {state}: {drafting:.1f} tok/s drafting against "
                          f"{plain:.1f} tok/s plain on this session's requests")

    def rate(self, drafting: bool) -> float | None:
        """Decode tokens per second over the recent requests of one mode; None before any."""
        samples = self._rates[drafting]
        if not samples:
            return None
        return sum(t for t, _ in samples) / (sum(ms for _, ms in samples) / 1000)

    def save(self) -> None:
        """Nothing is stored across sessions (the next one starts with drafting on)."""
