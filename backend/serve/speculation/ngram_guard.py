"""Never slower with n-gram lookup: per request, drafting off while it measured slower than plain
decoding on this server's own traffic, and back on when a probe says it pays again.

Why. n-gram lookup pays on text that repeats the context (a file written out again) and costs
on text it cannot predict, such as the agent's own turns on a CPU, where each drafted token
costs a good share of a plain step (docs/performance.md, "n-gram lookup"). Which of the two a
session is, only its traffic tells, and it may change between tasks.

How. On an engine that takes its draft length per request (the product's b11434 build:
``backend/engine/patches/b11434-per-request-draft-cap.patch``; ``speculative.n_max`` 0 takes a
request out of drafting, every drafter included), each request's decode time (``predicted_ms``
for ``predicted_n`` tokens, prefill excluded) is taken with drafting on or off. Plain decoding's
time per token does not depend on what is decoded, only on the context (it grows with it), so a
few plain requests give the reference, each at its context (``cache_n + prompt_n``); a drafting
request is compared with the plain one nearest in context, and the speedup is the plain time
those tokens would have taken over the time they took, summed over the recent drafting requests.
Drafting turns off when that is below 1 and back on only above :data:`ON_ABOVE` (a margin, so
noise does not flip it back and forth), each time on fresh evidence. The schedule: while on,
the second request of a session and one in :data:`REFERENCE_EVERY` after it decode plain; while
off, one in :data:`PROBE_EVERY` drafts; a scheduled request whose reply was too short to measure
is scheduled again. Nothing is stored: a session starts with drafting on.

Decision rule, not a prediction: BeeLlama's ``profit`` controller (``--spec-dm-*``) compares
speculative throughput with a periodically re-measured no-spec baseline the same way, inside
the server; this does it from outside, for an engine that has no such controller.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from backend.serve.profiles import LaunchPlan

REFERENCE_EVERY = 6
"""While drafting is on, one request in this many decodes plain, to keep the reference current
as the context grows (a plain token costs more at a longer context)."""

PROBE_EVERY = 5
"""While drafting is off, one request in this many drafts, to see whether it pays now."""

OFF_BELOW = 1.0
"""Drafting turns off when the recent drafting requests measure a speedup below this."""

ON_ABOVE = 1.05
"""Drafting comes back on only when the probes measure at least this speedup."""

WINDOW = 8
"""Drafting requests the speedup is taken over (the newest win); plain references kept."""

MIN_DRAFTING = 3
"""Drafting requests needed before a decision (one reply says little of a text's mix)."""

MIN_TOKENS = 32
"""A request that decoded fewer tokens says too little of a rate and is left out (its rate is
mostly the first token's and the stop's overhead)."""

NGRAM_DEFAULT_N_MAX = 64
"""llama.cpp's ngram-mod n_max (common/common.h), the longest a request drafts on a server whose
preset sets no lengths."""


@dataclass(frozen=True)
class _Sample:
    tokens: int
    ms: float
    context: int  # tokens in the context when decoding started


def _longest(plan: LaunchPlan) -> int:
    """The server's own ngram-mod n_max: the plan's lengths, else a ``--spec-ngram-mod-n-max``
    in the preset's extra flags (the last one wins, as in llama.cpp), else llama.cpp's."""
    if plan.options.ngram is not None:
        return plan.options.ngram.n_max
    flags = list(plan.extra_flags)
    values = [flags[i + 1] for i, flag in enumerate(flags[:-1])
              if flag == "--spec-ngram-mod-n-max"]
    return int(values[-1]) if values and values[-1].isdigit() else NGRAM_DEFAULT_N_MAX


class NgramGuard:
    """The draft length of each request to an n-gram lookup server that takes it per request:
    the server's own (``longest``) while drafting pays, 0 while it does not.

    The face of :class:`~backend.serve.speculation.control.RequestControl`, as
    :class:`~backend.serve.speculation.draft_cap.DraftCap` (``next_n_max``, ``observe``,
    ``save``), plus ``label`` for the agent's step lines. ``note`` is told when drafting turns
    off or on, with the speedup that decided it.
    """

    def __init__(self, plan: LaunchPlan, note: Callable[[str], None] | None = None):
        self.longest = _longest(plan)
        self.note = note
        self.restart()

    def restart(self) -> None:
        """Start as a new session does: drafting on, no evidence (a benchmark replaying
        several sessions on one client calls it between them)."""
        self.on = True
        self._sent = 0
        self._since = 0  # requests since the last reference (on) or probe (off)
        self._pending: bool | None = None  # the mode a scheduled request waits for
        self._plain: deque[_Sample] = deque(maxlen=WINDOW)
        self._drafting: deque[_Sample] = deque(maxlen=WINDOW)

    def next_n_max(self) -> int:
        """The length the next request carries (``speculative.n_max``; 0 = no drafting)."""
        self._sent += 1
        if self._pending is None:
            if self.on and (self._sent == 2 or self._since >= REFERENCE_EVERY - 1):
                self._pending = False
            elif not self.on and self._since >= PROBE_EVERY - 1:
                self._pending = True
            else:
                self._since += 1
        drafts = self.on if self._pending is None else self._pending
        return self.longest if drafts else 0

    def label(self, n_max: int) -> str:
        """What a step line says of a request that carried ``n_max``, with why it is off (a
        fresh-clone trial saw "n-gram lookup off" and nothing said why)."""
        if n_max:
            return "n-gram lookup"
        if self.on:
            return "n-gram lookup off (a plain reference to time it against)"
        return "n-gram lookup off (it measured slower than plain here)"

    def observe(self, n_max: int, timings: dict | None) -> None:
        """Take one answered request: ``n_max`` the length it carried, ``timings`` the server's
        (``predicted_n``, ``predicted_ms``, ``cache_n``, ``prompt_n``). A request with too few
        tokens or unusable timings is left out (a scheduled one is then sent again)."""
        if not isinstance(timings, dict):
            return
        try:
            tokens = int(timings.get("predicted_n") or 0)
            ms = float(timings.get("predicted_ms") or 0.0)
            context = int(timings.get("cache_n") or 0) + int(timings.get("prompt_n") or 0)
        except (TypeError, ValueError):
            return  # malformed timings are not evidence either way
        if tokens < MIN_TOKENS or not 0 < ms < float("inf"):
            return
        drafted = n_max > 0
        (self._drafting if drafted else self._plain).append(_Sample(tokens, ms, context))
        if self._pending is drafted:
            self._pending, self._since = None, 0
        self._decide()

    def speedup(self) -> float | None:
        """Drafting's speedup over plain decoding on the recent drafting requests (each against
        the plain reference nearest in context); None before there is evidence of both."""
        if not self._plain or len(self._drafting) < MIN_DRAFTING:
            return None
        plain_time = 0.0
        for sample in self._drafting:
            ref = min(self._plain, key=lambda p: abs(p.context - sample.context))
            plain_time += sample.tokens * ref.ms / ref.tokens
        return plain_time / sum(s.ms for s in self._drafting)

    def _decide(self) -> None:
        speedup = self.speedup()
        if speedup is None:
            return
        flip = speedup < OFF_BELOW if self.on else speedup >= ON_ABOVE
        if not flip:
            return
        self.on = not self.on
        self._drafting.clear()  # the new state is judged on fresh evidence
        self._since = 0
        if self.note is not None:
            self.note(f"n-gram lookup {'on' if self.on else 'off'}: drafting measured "
                      f"{speedup:.2f}x plain decoding on this session's requests")

    def save(self) -> None:
        """Nothing is stored across sessions (the next one starts with drafting on)."""
