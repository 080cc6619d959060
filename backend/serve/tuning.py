"""Speculation that pays: the draft length a speculative launch uses, chosen from measured costs
and measured acceptance, with drafting off whenever it would not beat plain decoding.

The model (SPECULATION-COSTS.md). A speculative step with K drafted tokens costs ``r(K)`` plain
decode steps (measured by ``agent backend calibrate`` with synthetic acceptance, or a stated
default). A draft whose tokens are each accepted with probability ``p`` yields
``1 + p + … + p^K`` tokens per step, so its speedup over plain decoding is::

    S(K, p) = e(K) · (1 + p + … + p^K) / r(K)

where ``e(K)`` (≤ 1) is what calibration measured at a partial acceptance against that formula
(85–92 % on an H200: partial acceptance has costs the formula leaves out). The launch drafts
with the K of the best S, or not at all when no K is predicted to beat plain decoding by
:data:`MARGIN`; when a K has been *measured* on the user's own traffic (decode tok/s against the
calibrated plain rate) the measured figure is used when it is the lower one.

``p`` comes from observations of the draft (``draft_n`` / ``draft_n_accepted`` at a known K;
a length observed on enough text of its own is predicted from those alone,
:func:`length_estimates`):
a probe at launch (:func:`probe`, a few short requests on a server with the draft), ``agent
backend bench`` runs and the agent's own turns (recorded at the end of each session). When
drafting is off no observation arrives, so the next launch probes again once the last probe is
:data:`REPROBE_AFTER` old: drafting comes back when a probe says it would pay.

"Off" means no draft block is decoded. A confidence cut (``--spec-draft-p-min``) is not an off
switch — the draft's forward pass still runs every step (0.68–0.74× plain measured with nothing
drafted) — so off is either a server without the draft (``dflash`` runs plain, ``dflash+ngram``
n-gram lookup only) or, on an engine built with the product's patch, a request that carries
``speculative.n_max`` 0.

The per-request cap (``backend/engine/patches/b11434-per-request-draft-cap.patch``). b11434
compiled the per-request speculative fields out (``tools/server/server-schema.cpp`` ~197,
``#if 0``), and even compiled in they would do nothing: ``server_slot::get_n_draft_max()``
(``tools/server/server-context.cpp`` ~517) sizes a draft from the context and budget left, and
``draft-dflash``'s ``draft()`` (``common/speculative.cpp`` ~1262) always decodes a block of the
launch length (``params.n_max``), which ``common_speculative_draft`` then cuts to the slot's
``n_max``. The patch parses ``speculative.n_max`` into the task, caps ``get_n_draft_max()``
with it (0: the slot is not in the drafting loop, ~3207, so no draft block runs) and decodes a
block of the capped length, so a request at K costs what a launch at K costs. What still runs
at 0 is ``draft-dflash``'s ``process()`` after every target batch (~1157: the target's layer
inputs through the draft's ``fc``, norm and per-layer K/V projections into the draft's KV
cache; no attention, FFN or vocabulary head), which keeps the draft's cache in step so that a
later request drafts with the whole context. Measured on the 2-core CPU with SmolLM2 and the
v1 draft, side by side (``benchmarks/draft_cap.py``, benchmarks/RESULTS.md): requests at 0
decoded at 0.97x of the no-draft server (median of 15 back-to-back pairs 0.99x; the pairs
spread 0.88-1.09x on the shared VM), and requests capped at 3 on a server launched at 15 at
0.43x against 0.44x for the server launched at 3 (the same 6,680 drafted tokens; 0.86x against
0.88x at a synthetic acceptance of 0.75): a true off within the noise, and a length that
changes between two requests without a restart. That injection is not free everywhere: on an
H200 requests at 0 decoded at 0.90x (SmolLM2; 1.02x on the 2-core CPU with the 2-layer v2
draft, ``agent backend calibrate``), and calibration's idle row does not tell where: on the
H200 it put v5 at 1.01x of plain, and benches with it loaded and off ran 0.92-0.93x. So a
launch that chooses off starts without the draft; a session whose requests turn drafting off
later keeps it loaded until it has cost a relaunch (:meth:`DraftCap.unload_due`, where
calibration measured it under :data:`IDLE_FLOOR` of plain).

So on a patched engine the tuned ``dflash`` profile (:func:`per_request_cap`) launches with the
draft loaded at the longest length when it drafts (or when drafting is predicted near
break-even: :data:`EXPLORE_FROM`), and :class:`DraftCap` chooses each
request's length (0 = off) from the stored observations and the session's own, re-choosing after
every request, against what off costs on that server (the loaded draft's measured idle cost, not
plain decoding); while off, a request drafts :data:`TURN_PROBE_LENGTH` tokens once a probe is due,
and its acceptance decides again. Elsewhere (an engine without the patch: a user's own build, one
built before the patch; ``dflash+ngram``, whose n-gram drafts a per-request cap would cut too) the
length is per server: a re-choice takes effect at the next launch, between tasks, never mid-turn,
and off is a launch without the draft. BeeLlama <= 0.3 is tuned the same way, per launch: its own
``profit`` controller (on by default) ran at 0.41-0.45x of plain decoding with the v1 draft on an
H200 without ever turning drafting off, so a length the product chose is launched with that
controller off (:func:`backend.serve.profiles.server_argv`), and ``dflash-fixed`` keeps the
engine's defaults as the reference. Observations carry the sampling temperature of their requests,
and a choice reads only those of its own kind, greedy (0) or sampled (above 0): on one H200 the v4
draft drafting 5 tokens ran the edit set at 1.42x plain at temperature 0 and 0.84x at 0.7, from one
record (benchmarks/h200-q8-2026-12-03). Nothing else is chosen per kind of turn: a turn's kind
shows only in what it decodes, after its length was sent. ``--spec-draft-p-min`` stays 0: choosing
a cut needs the draft's confidence on real text, which synthetic acceptance cannot give, and a cut
does not remove the draft pass's cost.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import httpx2
from filelock import FileLock
from pydantic import BaseModel, Field, ValidationError, field_validator

from backend import machine
from backend.engine.build import PER_REQUEST_DRAFT_CAP
from backend.engine.flavour import detect_flavour
from backend.home import home
from backend.models.presets import NgramLengths
from backend.serve.fit import FitError, check_fit
from backend.serve.ngram_guard import NgramGuard
from backend.serve.profiles import LaunchPlan, get_profile
from backend.serve.server import (
    DEFAULT_HOST,
    ServerError,
    keep_current_marker,
    pick_port,
    stop,
    up,
)

MARGIN = 1.05
"""Drafting must be predicted to beat plain decoding by 5 %: the model is measured to within
~10 %, and a draft that only breaks even costs memory and risk for nothing."""

IDLE_FLOOR = 0.99
"""A server keeping its draft loaded while no request drafts must decode at this share of a
server without the draft, measured (``agent backend calibrate``), for drafting off to stay per
request; otherwise off launches without the draft. Never slower is the promise, and calibrate
reads this cost low: on an H200 it measured 0.972 (v4 draft, 2026-12-03), and the benches of
that run decoded at 0.94-0.95x of plain with the draft loaded and every request at 0; 0.97,
the floor until then, let that draft stay loaded."""

EXPLORE_FROM = MARGIN - 0.10
"""With drafting off but predicted within 10 % under :data:`MARGIN`, a server that takes its
length per request keeps the draft loaded and a session's first requests draft the best
predicted length (:class:`DraftCap`), so that the session's own text decides. The launch
probe's two requests read acceptance to about ±0.1 a token (0.51 and 0.70 for its two prompts on
an H200, 0.26 and 0.74 on the 2-core CPU), about ±10 % of predicted speedup near break-even; and
the edit and seed requests it then kept at plain speed accepted 0.71 a token, which drafting 5
tokens turned into 1.31-1.42x plain (benchmarks/h200-q8-2026-12-03)."""

EXPLORE_TOKENS = 256
"""Tokens a session decodes while exploring (:data:`EXPLORE_FROM`) before its choice rests on
what it measured: about as much text as the launch probe's 2 x :data:`PROBE_TOKENS`, so that
the session's own weighs about as much (:func:`estimate_p` weights by tokens decoded)."""

REPROBE_AFTER = timedelta(hours=24)
"""While drafting is off, a launch probes the draft again once the last probe is this old."""

MAX_OBSERVATIONS = 50
"""Observations kept per (engine, model, draft); the newest win."""

TURN_PROBE_LENGTH = 3
"""Draft length of a request that probes the draft in a session (drafting off, a probe due, on a
server that takes its length per request): the probe is a real turn, so a short draft, which
costs ~3 plain steps a step on a CPU when nothing is accepted against ~8 at 15; the per-token
acceptance it measures stands for every length, as the launch probe's does."""

PROBE_TOKENS = 160
"""Tokens decoded per probe request: past an answer's opening line into its code, which is what
a coding agent decodes most; a few seconds on a CPU. At 48 the probe read v4 at 0.58-0.61 a token
on an H200 where the edit and seed requests it then served accepted 0.71-0.73 (2026-12-03); on
the 2-core CPU its second prompt read 0.70 over 48 tokens and 0.71 over 160, and the two prompts
weighted by text 0.60 and 0.67 against the edit and seed sets' 0.66."""

PROBE_PROMPTS = (
    # An edit (text the answer repeats) and new code (text it does not): the two kinds of turn
    # a coding agent decodes most.
    "Rename the function `total` to `sum_prices` in this code and show the whole file:\n\n"
    "def total(items):\n    result = 0\n    for item in items:\n        result += item.price\n"
    "    return result\n\n\nprint(total([]))\n",
    "Write a Python function `parse_csv(text)` that parses CSV text into a list of dicts, "
    "handling quoted fields.",
)

# Step cost at K drafted tokens with nothing accepted, in plain steps: SmolLM2-135M with a
# 1-layer DFlash draft, the most expensive rows measured (a larger target's steps cost less
# relative to plain, so these do not overstate a gain there). CPU: about the highest of
# four calibrations on the 2-core Xeon VM on 2026-12-02 (benchmarks/RESULTS.md; the
# SPECULATION-COSTS.md figures, 2.5 / 4.0 / 6.6 at K = 3 / 7 / 15, came from a faster day);
# GPU: `agent backend calibrate` on an H200 (benchmarks/RESULTS.md, 2026-12-02).
# 0.85 = the low end of the measured efficiency at partial acceptance.
_DEFAULT_RATIOS = {"cpu": {1: 2.3, 2: 2.8, 3: 3.2, 5: 4.8, 7: 5.5, 15: 8.3},
                   "gpu": {1: 1.81, 2: 1.96, 3: 1.93, 5: 2.36, 7: 2.64, 15: 4.76}}
_DEFAULT_EFFICIENCY = 0.85


class TuningError(RuntimeError):
    """A stored cost model or acceptance record could not be read or written."""


class CostModel(BaseModel):
    """What a speculative step costs on one engine, target, draft and device.

    ``step_ratio[K]`` is the time of one step with K drafted tokens and none accepted, in plain
    decode steps (``plain_ms`` each). ``efficiency[K]`` is measured speedup / predicted speedup
    at ``check_p``; predictions use their median (:meth:`pooled_efficiency`)."""

    source: Literal["calibrated", "default"]
    engine: str = Field(description="Engine key (build, CPU or CUDA).")
    model: str = Field(description="Target GGUF file name and size.")
    draft: str = Field(description="Draft GGUF file name and size.")
    device: str = Field(description="GPU names, or 'cpu'.")
    plain_ms: float | None = Field(None, description="ms per token decoding plain.")
    step_ratio: dict[int, float]
    efficiency: dict[int, float] = {}
    check_p: float | None = None
    synthetic: bool = Field(True, description="False when the engine had no synthetic "
                            "acceptance and the real draft was timed instead.")
    idle_ratio: float | None = Field(None, description="Time per token of a server with the "
                                     "draft loaded whose requests draft nothing "
                                     "(speculative.n_max 0), in plain tokens: what keeping "
                                     "drafting off without a restart costs. None: not measured.")
    measured_at: datetime | None = None

    @field_validator("step_ratio")
    @classmethod
    def _ratios(cls, value: dict[int, float]) -> dict[int, float]:
        if any(not 1 <= k <= 15 or not math.isfinite(r) or r <= 0 for k, r in value.items()):
            raise ValueError("step costs need lengths 1..15 and finite costs above 0")
        return value

    @field_validator("idle_ratio")
    @classmethod
    def _idle(cls, value: float | None) -> float | None:
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise ValueError("idle_ratio must be finite and above 0")
        return value

    def idle_speed(self) -> float | None:
        """How fast a server with the draft loaded decodes when no request drafts, relative to
        plain decoding (``1 / idle_ratio``); None when not measured."""
        return None if self.idle_ratio is None else 1.0 / self.idle_ratio

    def idle_is_free(self) -> bool:
        """Whether drafting may stay off per request with the draft loaded: measured at no
        less than :data:`IDLE_FLOOR` of plain decoding (never assumed)."""
        speed = self.idle_speed()
        return speed is not None and speed >= IDLE_FLOOR

    @field_validator("efficiency")
    @classmethod
    def _efficiency(cls, value: dict[int, float]) -> dict[int, float]:
        if any(not math.isfinite(e) or not 0 < e <= 1 for e in value.values()):
            raise ValueError("efficiency must be in (0, 1]")
        return value

    def pooled_efficiency(self) -> float:
        """The efficiency every length is predicted with: the median of the measured ones
        (1.0 when none was measured).

        One synthetic check per length is too noisy to rank lengths by: on the H200 the same
        server's check moved by up to 0.2 between three calibrations (K = 2: 0.88-1.0, K = 3:
        0.79-0.85, K = 15: 0.74-0.93), while real drafts on the edit set cost 3-5 % more a step
        at 3 than at 2 (benchmarks/h200-first-2026-12-04). Ranked per length, the same launch
        probe chose length 2, 5 or off on those three calibrations; at the median, all three
        choose 3, which ran the edit set at 1.24x where length 2 ran 1.04-1.13x."""
        values = sorted(self.efficiency.values())
        return statistics.median(values) if values else 1.0

    def speedup(self, k: int, p: float) -> float:
        """Predicted speedup over plain decoding at draft length ``k`` (a measured length)
        for per-token acceptance ``p`` in [0, 1], at :meth:`pooled_efficiency`."""
        return self.pooled_efficiency() * tokens_per_step(p, k) / self.step_ratio[k]

    def break_even(self, k: int) -> float | None:
        """The acceptance ``p`` at which length ``k`` breaks even; None if it never does."""
        if self.speedup(k, 1.0) < 1.0:
            return None
        lo, hi = 0.0, 1.0
        for _ in range(40):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if self.speedup(k, mid) < 1.0 else (lo, mid)
        return hi


class Observation(BaseModel):
    """One measurement of the draft on real text: what it drafted and what was accepted."""

    source: Literal["probe", "bench", "session"]
    n_max: int = Field(ge=1, description="Draft length in force (--spec-draft-n-max).")
    draft_n: int = Field(ge=0)
    accepted: int = Field(ge=0)
    tokens: int = Field(0, ge=0, description="Tokens decoded.")
    decode_ms: float = Field(0.0, ge=0, allow_inf_nan=False)
    at: datetime
    failed: str | None = Field(None, description="Why a probe failed (then nothing else is "
                               "measured): kept so that the next launches do not pay for a "
                               "failing probe again until it is due.")
    temperature: float | None = Field(None, ge=0.0, allow_inf_nan=False, description="Sampling "
                                      "temperature of the requests observed; None in records "
                                      "made before it was kept, read as greedy "
                                      "(:func:`same_sampling`).")

    @field_validator("at")
    @classmethod
    def _utc(cls, value: datetime) -> datetime:
        # A hand-edited record without a time zone is read as UTC, not a crash on comparing.
        return value if value.tzinfo else value.replace(tzinfo=UTC)


class AcceptanceRecord(BaseModel):
    """The newest :data:`MAX_OBSERVATIONS` observations of one draft with one target."""

    observations: list[Observation] = []


class Tuning(BaseModel):
    """A launch's speculation choice and why; ``n_max`` 0 means drafting off."""

    n_max: int = Field(ge=0)
    p: float | None = Field(None, description="Estimated per-token acceptance.")
    predicted: float | None = Field(None, description="Predicted speedup at n_max (at the "
                                    "best length when off).")
    costs: Literal["calibrated", "default"]
    reason: str
    off_label: str = Field("drafting off", description="What off means for the profile "
                           "('draft model off (n-gram lookup only)' for dflash+ngram).")
    per_request: bool = Field(False, description="True when the server keeps the draft loaded "
                              "at its longest length and each request carries the chosen "
                              "length (speculative.n_max; 0 = no draft): :class:`DraftCap` "
                              "re-chooses it between requests, without a restart.")
    best: int | None = Field(None, description="The length with the best prediction, also "
                             "when drafting is off (the length a session explores at: "
                             ":data:`EXPLORE_FROM`).")

    def explores(self) -> bool:
        """Whether drafting is off but predicted near enough to :data:`MARGIN` for a
        session's first requests to draft :attr:`best` tokens and measure."""
        return (self.n_max == 0 and self.best is not None and self.predicted is not None
                and self.predicted >= EXPLORE_FROM)

    def line(self) -> str:
        """One line for the user: the choice, then why (never more than one line)."""
        head = self.off_label if self.n_max == 0 else f"draft length {self.n_max}"
        if self.per_request:
            head += " per request"
        text = f"{head}: {self.reason}"
        if self.per_request and self.explores():
            text += (f"; a session's first {EXPLORE_TOKENS} tokens draft {self.best} a step "
                     "to measure it on their own text")
        return " ".join(text.split())


def tokens_per_step(p: float, k: int) -> float:
    """Expected tokens per step, ``1 + p + … + p^k`` (the target's own token included)."""
    return float(k + 1) if p >= 1.0 else (1.0 - p ** (k + 1)) / (1.0 - p)


def synth_rates(p: float, k: int) -> str:
    """``--spec-synth-rates`` for per-token acceptance ``p`` over ``k`` positions: the
    unconditional rates p, p², …, p^k (b11434 wants them non-increasing, one per position)."""
    return ",".join(f"{p ** (i + 1):.6g}" for i in range(k))


def acceptance_from_ratio(ratio: float, k: int) -> float:
    """The per-token acceptance ``p`` whose expected accepted share of a K-token draft,
    ``(p + p² + … + p^k) / k``, equals ``ratio`` (accepted / drafted, in [0, 1])."""
    ratio = min(max(ratio, 0.0), 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        share = (tokens_per_step(mid, k) - 1.0) / k
        lo, hi = (mid, hi) if share < ratio else (lo, mid)
    return (lo + hi) / 2


def same_sampling(observed: float | None, temperature: float | None) -> bool:
    """True when an observation at temperature ``observed`` speaks for requests at
    ``temperature``: both greedy (0) or both sampled (above 0); ``temperature`` None (a caller
    that does not know) takes every observation. A draft proposes its most likely tokens, which
    sampling at 0.7 keeps far less often than greedy decoding does.

    An observation recorded before temperatures were kept (``observed`` None) counts as greedy:
    probes always ran at temperature 0, and reading such a record for sampled requests is what
    drafted 5 tokens at 0.7 on an H200 at 0.84x plain; sampled requests probe anew instead."""
    if temperature is None:
        return True
    return ((observed or 0.0) == 0) == (temperature == 0)


def at_temperature(observations: Iterable[Observation], temperature: float | None
                   ) -> list[Observation]:
    """The observations that speak for requests at ``temperature`` (:func:`same_sampling`)."""
    return [o for o in observations if same_sampling(o.temperature, temperature)]


def estimate_p(observations: Iterable[Observation]) -> float | None:
    """Per-token acceptance from observations at their own lengths, each weighted by the
    tokens it decoded (by tokens drafted when one of them does not say); None when nothing
    was drafted.

    Weighting by text, not by drafted tokens: a draft of 15 tokens a step drafts ~5 tokens per
    token decoded and one of 3 under 1, so a probe at 15 of 2 x 48 tokens outweighed a
    session's whole 1,200-token turn at 3, and the turns whose drafts fail most (the most
    steps, so the most drafted tokens) outweighed those that pay."""
    drafted = [o for o in observations if o.draft_n]
    by_text = all(o.tokens for o in drafted)
    total = sum(o.tokens if by_text else o.draft_n for o in drafted)
    weighted = sum(acceptance_from_ratio(o.accepted / o.draft_n, o.n_max)
                   * (o.tokens if by_text else o.draft_n) for o in drafted)
    return weighted / total if total else None


LENGTH_MIN_TOKENS = 256
"""Text a draft length needs observed at it (tokens decoded) before its own acceptance, not
the estimate pooled over every length, predicts it (:func:`length_estimates`)."""


def length_estimates(observations: Iterable[Observation]) -> dict[int, float]:
    """Per-token acceptance per draft length, from the observations at that length alone
    (:func:`estimate_p`), for the lengths with at least :data:`LENGTH_MIN_TOKENS` tokens
    decoded there.

    A DFlash draft predicts a block's positions at once, and the later ones are right less
    often: one acceptance per token fitted at a short length promises too much at a long one.
    On an H200 (benchmarks/h200-first-2026-12-04) the edit set's longest answer accepted 0.73
    a token at length 2 and 0.65 at 7, where it decoded at 0.90x of its speed at 2; and the
    agent replay, its estimate pooled over lengths, went on from a measured length 2 to lengths
    5 and 7 untried, where its short answers ran at 0.56-0.92x of baseline. A length measured
    on its own keeps its own figure; the others take the pooled one."""
    by_length: dict[int, list[Observation]] = {}
    for o in observations:
        if o.draft_n:
            by_length.setdefault(o.n_max, []).append(o)
    out: dict[int, float] = {}
    for k, at_k in by_length.items():
        p = estimate_p(at_k)
        if p is not None and sum(o.tokens for o in at_k) >= LENGTH_MIN_TOKENS:
            out[k] = p
    return out


MEASURED_MIN_TOKENS = 128
"""A request counts towards a measured speedup (:func:`_measured_speedups`) from this many
tokens: a short answer decodes slower than the calibrated rate whatever drafts it (on an H200
plain decoding ran 680 tok/s on a 66-token answer against 780 calibrated), and one such answer
of 99 tokens read as 0.79x turned drafting off for a whole bench (2026-12-03)."""

MEASURED_MIN_TOTAL = 512
"""Tokens of such requests a length needs before its measured speedup is used."""


def _measured_speedups(costs: CostModel, observations: list[Observation]) -> dict[int, float]:
    """Speedup per length measured on real traffic (decode rate against the calibrated plain
    rate); only with a calibrated plain rate, from requests of at least
    :data:`MEASURED_MIN_TOKENS` tokens, :data:`MEASURED_MIN_TOTAL` of them at that length."""
    if costs.source != "calibrated" or not costs.plain_ms:
        return {}
    out: dict[int, float] = {}
    for k in {o.n_max for o in observations}:
        at_k = [o for o in observations if o.n_max == k and o.decode_ms > 0
                and o.tokens >= MEASURED_MIN_TOKENS]
        tokens = sum(o.tokens for o in at_k)
        if tokens >= MEASURED_MIN_TOTAL:
            out[k] = tokens / sum(o.decode_ms for o in at_k) * costs.plain_ms
    return out


def choose(costs: CostModel, p: float | None, observations: list[Observation] = (),
           max_n: int = 15, off_speed: float = 1.0) -> Tuning:
    """The draft length to launch with (0 = off) for acceptance ``p``.

    Lengths are those the cost model measured, capped at ``max_n``. With ``p`` None (nothing
    known about the draft) drafting is off. ``off_speed``: how fast not drafting decodes,
    relative to plain (1 at a launch, where off is a server without the draft; below 1 on a
    server whose loaded draft costs even when no request drafts: :class:`DraftCap`); a length
    must beat it by :data:`MARGIN`. A length measured on real text scores the lower of its
    prediction and its measured speedup; an untried one scores its prediction times the share
    of its own prediction the best tried length ran at, and must beat that length by
    :data:`MARGIN` too. Pure: reads nothing.
    """
    label = costs.source
    if p is None:
        return Tuning(n_max=0, costs=label, reason="nothing measured about this draft yet")
    lengths = sorted(k for k in costs.step_ratio if 1 <= k <= max_n)
    if not lengths:
        return Tuning(n_max=0, p=p, costs=label, reason="no measured draft length")
    measured = _measured_speedups(costs, list(observations))
    own = length_estimates(observations)
    at = {k: own.get(k, p) for k in lengths}
    predicted = {k: costs.speedup(k, at[k]) for k in lengths}
    scores = {k: min(predicted[k], measured.get(k, math.inf)) for k in lengths}
    tried = [k for k in lengths if k in own or k in measured]
    held = max(tried, key=lambda k: (scores[k], -k)) if tried else None
    realised = 1.0
    if held is not None:
        # The best length tried ran at this share of its prediction, and an untried one runs
        # on the same server and text: without it, a length measured short of its prediction
        # (the H200 edit set at 3: 1.15x measured, 1.27x predicted) lost to an untried one at
        # its full prediction (5: 1.26x), and ran at 1.06x where 3 had run 1.22x.
        realised = scores[held] / predicted[held]
        scores.update({k: predicted[k] * realised for k in lengths if k not in tried})
    best = max(lengths, key=lambda k: (scores[k], -k))
    if held is not None and best not in tried and scores[best] < MARGIN * scores[held]:
        # An untried length rests on acceptance pooled over the others, which a short length's
        # early block positions flatter: it must beat the best length measured on its own text
        # by the margin drafting must beat plain decoding by, or the choice hops between
        # lengths on noise (an H200 agent replay went 2 -> 5 -> 7, its short answers at
        # 0.56-0.92x of baseline, on a pooled 1.39x against length 2's measured 1.37x).
        best = held
    where = "calibrated" if label == "calibrated" else "default (uncalibrated)"
    seen = f"acceptance {p:.2f} per token"
    if best in own:
        seen += f" ({own[best]:.2f} at length {best} itself)"
    why = f"{seen}; {where} step costs predict {scores[best]:.2f}x at length {best}"
    if best not in tried and realised < 1.0:
        why += f" (at the {realised:.2f} of its prediction length {held} ran at)"
    if best in measured and measured[best] <= costs.speedup(best, at[best]):
        why = f"{seen}; measured {measured[best]:.2f}x at length {best}"
    if off_speed < 1.0:
        why += f"; off runs at {off_speed:.2f}x here, the draft staying loaded"
    if scores[best] < MARGIN * off_speed:
        bar = (f"the {MARGIN:.2f}x it must beat plain decoding by" if off_speed >= 1.0
               else f"the {MARGIN * off_speed:.2f}x it must beat that by")
        return Tuning(n_max=0, p=p, predicted=scores[best], costs=label, best=best,
                      reason=f"{why}, under {bar}")
    return Tuning(n_max=best, p=p, predicted=scores[best], costs=label, reason=why, best=best)


# --- identity and storage -------------------------------------------------------------------

def file_id(path: Path) -> str:
    """Name, size and modification time: a retrained draft of the same name and shape (same
    size) must not inherit the old one's record."""
    try:
        st = path.stat()
        return f"{path.name}:{st.st_size}:{int(st.st_mtime)}"
    except OSError:
        return path.name


def _installed(binary: Path) -> bool:
    """True for a binary the product built into the home (``<engines>/<key>/bin/…``)."""
    return binary.parent.name == "bin" and binary.parent.parent.parent == home().engines


def engine_key(binary: Path) -> str:
    """The engine's key: its install folder's name (build, CPU tag or CUDA) for an engine the
    product built, else the binary's path, size and time (a registered system engine, which
    can be upgraded in place)."""
    return binary.parent.parent.name if _installed(binary) else f"{binary}:{file_id(binary)}"


def device_id(binary: Path) -> str:
    """The device a server of ``binary`` decodes on: GPU names for a CUDA build (or any
    binary the product did not build, when the machine has a GPU), else 'cpu'."""
    if _installed(binary) and "cuda" not in engine_key(binary).lower():
        return "cpu"
    gpus = machine.gpu_names()
    return "; ".join(gpus) if gpus else "cpu"


def _key(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _speculation_dir() -> Path:
    return home().state / "speculation"


def costs_path(plan: LaunchPlan, device: str) -> Path:
    """Where the cost model of ``plan``'s engine, target and draft on ``device`` is stored."""
    draft = file_id(plan.draft) if plan.draft else "-"
    return _speculation_dir() / "costs" / (
        _key(engine_key(plan.binary), file_id(plan.model), draft, device) + ".json")


def acceptance_path(plan: LaunchPlan) -> Path:
    """Where the observations of ``plan``'s draft with its target are stored, per kind of
    speculation: a ``dflash+ngram`` server's ``draft_n`` counts n-gram drafts too, so its
    record is its own; ``dflash`` and ``dflash-fixed`` (the draft model alone) share one."""
    draft = file_id(plan.draft) if plan.draft else "-"
    kinds = ",".join(get_profile(plan.profile).spec_types)
    return _speculation_dir() / "acceptance" / (
        _key(engine_key(plan.binary), file_id(plan.model), draft, kinds) + ".json")


def _offloads(plan: LaunchPlan) -> bool:
    """True unless the preset keeps the target or the draft on the CPU (``gpu_layers`` or
    ``draft_gpu_layers`` 0)."""
    return all(v is None or v != "0" for v in (plan.options.gpu_layers,
                                                plan.options.draft_gpu_layers))


NGRAM_GPU = NgramLengths(n_match=6, n_min=2, n_max=64)
"""ngram-mod's lengths where the target decodes on a GPU (llama.cpp's are 24 / 48 / 64).

Measured on the agent's own turns (forced replay, benchmarks/RESULTS.md "n-gram lookup's
lengths"): lookups that start after 6 matching tokens and draft from 2 found 1.54 tokens a
target step on the edit turns against 1.10 at llama.cpp's lengths (a grid of eight; the agent
copies 40-110-token snippets, and a 24-token key waits for a quarter of one before it drafts;
the view tool's line numbers made no difference: 1.52 and 1.10 without them); on one H200 the
7.4 B shape ran those turns at 1.04x baseline against 0.86x (forced, a lower bound). n_max
stays 64: a GPU verifies a long draft for little, and whole files repeated keep their gain (the
bench's edit set 1.85x against 1.91x). On the 2-core CPU every drafted token costs (a step with
1.4 drafted tokens cost two plain ones there): the same lengths ran those turns at 0.74x
against 0.90x and the edit set at 1.50x against 1.79x, so a CPU keeps llama.cpp's."""


def with_ngram_lengths(plan: LaunchPlan) -> LaunchPlan:
    """``plan`` with ngram-mod's lengths chosen for its device: :data:`NGRAM_GPU` for the
    ``ngram`` profile where the target decodes on a GPU (a CUDA build, its layers not kept on
    the CPU), llama.cpp's elsewhere. A preset's own ``server.ngram`` is kept as given;
    ``dflash+ngram`` keeps llama.cpp's lengths unless the preset sets them (its n-gram side
    was not measured at other lengths, and its acceptance record does not tell them apart)."""
    if plan.profile != "ngram" or plan.options.ngram is not None \
            or plan.options.gpu_layers == "0" or device_id(plan.binary) == "cpu":
        return plan
    return plan.model_copy(update={"options": plan.options.model_copy(
        update={"ngram": NGRAM_GPU})})


def default_costs(plan: LaunchPlan, device: str) -> CostModel:
    """The stated default cost model (the most expensive rows measured, see above): the CPU's
    unless the plan decodes on a GPU with both models offloaded."""
    ratios = _DEFAULT_RATIOS["gpu" if device != "cpu" and _offloads(plan) else "cpu"]
    return CostModel(source="default", engine=engine_key(plan.binary),
                     model=file_id(plan.model),
                     draft=file_id(plan.draft) if plan.draft else "-", device=device,
                     step_ratio=dict(ratios),
                     efficiency={k: _DEFAULT_EFFICIENCY for k in ratios})


def _write_json(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file of its own, then a rename)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise TuningError(f"cannot write {path}: {exc}") from exc


def save_costs(costs: CostModel, plan: LaunchPlan) -> Path:
    """Store ``costs`` for ``plan`` (keyed by engine, target, draft, device); returns the path.
    Raises :class:`TuningError`."""
    path = costs_path(plan, costs.device)
    _write_json(path, costs.model_dump_json(indent=2))
    return path


def load_costs(plan: LaunchPlan, device: str,
               note: Callable[[str], None] | None = None) -> CostModel:
    """The calibrated cost model for ``plan`` on ``device``, else :func:`default_costs`.

    A stored file that cannot be read is said through ``note`` and the default is used: a
    damaged file never stops a launch.
    """
    path = costs_path(plan, device)
    if path.is_file():
        try:
            return CostModel.model_validate_json(path.read_text("utf-8"))
        except (OSError, ValueError, ValidationError) as exc:
            if note:
                note(f"ignoring the damaged cost model {path} ({type(exc).__name__}); "
                     "run `agent backend calibrate` again")
    return default_costs(plan, device)


def load_observations(plan: LaunchPlan,
                      note: Callable[[str], None] | None = None) -> list[Observation]:
    """The stored observations of ``plan``'s draft, oldest first; a damaged record is said
    through ``note`` and treated as empty."""
    path = acceptance_path(plan)
    if not path.is_file():
        return []
    try:
        return AcceptanceRecord.model_validate_json(path.read_text("utf-8")).observations
    except (OSError, ValueError, ValidationError) as exc:
        if note:
            note(f"ignoring the damaged acceptance record {path} ({type(exc).__name__})")
        return []


def record(plan: LaunchPlan, new: Iterable[Observation]) -> None:
    """Append observations of ``plan``'s draft (the newest :data:`MAX_OBSERVATIONS` kept).
    Raises :class:`TuningError` when the record cannot be written."""
    new = [o for o in new if o.draft_n > 0 or o.tokens > 0 or o.failed]
    if not new or plan.draft is None:
        return
    path = acceptance_path(plan)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(path) + ".lock")
        lock.acquire(timeout=30)
    except (OSError, TimeoutError) as exc:
        raise TuningError(f"cannot lock {path}: {exc}") from exc
    try:  # sessions ending together must not lose each other's observations
        kept = (load_observations(plan) + new)[-MAX_OBSERVATIONS:]
        _write_json(path, AcceptanceRecord(observations=kept).model_dump_json())
    finally:
        lock.release()


def record_turns(plan: LaunchPlan, timings: Iterable[dict], source: Literal[
        "bench", "session"] = "session", n_max: int | None = None,
        temperature: float | None = None) -> int:
    """Record llama-server ``timings`` of requests served by ``plan`` (a server that drafted
    with length ``plan.draft_n_max``, or ``n_max`` when the requests carried that length
    themselves: :func:`per_request_cap`), sampled at ``temperature``; returns how many
    carried drafts. Requests that drafted nothing count too (their tokens, at zero
    acceptance). Raises :class:`TuningError`."""
    k = effective_n_max(plan) if n_max is None else n_max
    if not k:
        return 0
    now = datetime.now(UTC)
    obs = []
    for t in timings:
        try:
            obs.append(Observation(source=source, n_max=k, draft_n=int(t.get("draft_n") or 0),
                                   accepted=int(t.get("draft_n_accepted") or 0),
                                   tokens=int(t.get("predicted_n") or 0),
                                   decode_ms=float(t.get("predicted_ms") or 0.0), at=now,
                                   temperature=temperature))
        except (TypeError, ValueError, ValidationError):
            continue  # a malformed timings object is not evidence either way
    record(plan, obs)
    return sum(1 for o in obs if o.draft_n)


def effective_n_max(plan: LaunchPlan) -> int:
    """The draft length a server of ``plan`` drafts with (0 when it loads no draft); for a
    server that takes the length per request, the longest a request may ask for."""
    profile = get_profile(plan.profile)
    if not profile.needs_draft or plan.draft is None:
        return 0
    return plan.draft_n_max if plan.draft_n_max is not None else (profile.draft_n_max or 0)


def per_request_cap(plan: LaunchPlan) -> bool:
    """True when a server of ``plan`` takes its draft length per request: the tuned ``dflash``
    profile with a draft (loaded: not a length of 0), on an engine the product built with the
    per-request draft cap patch: the ``engine.json`` beside its ``bin/`` lists
    :data:`~backend.engine.build.PER_REQUEST_DRAFT_CAP` (the manifest describes that binary,
    also when another home registered it as its ``system`` engine).

    Not ``dflash+ngram``: the cap limits every drafter of the request, so a length chosen for
    the draft model would also cut the n-gram drafts (48-64 tokens of copied text) that are
    that profile's point. Not another ``llama-server``: the product cannot tell whether it
    honours the field (upstream b11434 ignores it; BeeLlama <= 0.3 honours it and sizes drafts
    itself: :func:`tune`)."""
    if plan.profile != "dflash" or plan.draft is None or plan.draft_n_max == 0:
        return False
    return takes_length_per_request(plan.binary)


def takes_length_per_request(binary: Path) -> bool:
    """True when ``binary`` was built by the product with the per-request draft cap patch:
    the ``engine.json`` beside its ``bin/`` lists
    :data:`~backend.engine.build.PER_REQUEST_DRAFT_CAP`."""
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
    ``temperature``), an
    :class:`~backend.serve.ngram_guard.NgramGuard` for ``ngram`` on an engine with the patch
    (``ngram-fixed`` is the untouched reference), None elsewhere (the launch's length)."""
    if per_request_cap(plan):
        return DraftCap(plan, note, temperature)
    if plan.profile == "ngram" and takes_length_per_request(plan.binary):
        return NgramGuard(plan, note)
    return None


# --- the probe --------------------------------------------------------------------------------

def probe_due(observations: list[Observation], now: datetime | None = None) -> bool:
    """True when nothing was observed yet, or the newest observation is older than
    :data:`REPROBE_AFTER` (drafting off produces none, so this is how it comes back)."""
    if not observations:
        return True
    newest = max(o.at for o in observations)
    return (now or datetime.now(UTC)) - newest > REPROBE_AFTER


def probe(plan: LaunchPlan, n_max: int, timeout: float = 600.0,
          note: Callable[[str], None] | None = None,
          temperature: float = 0.0) -> list[Observation]:
    """Measure the draft's acceptance on :data:`PROBE_PROMPTS` at length ``n_max``.

    Starts a server of ``plan`` drafting ``n_max`` tokens (an alias of its own, so never the
    user's server nor a concurrent probe's), sends each prompt once (at ``temperature``,
    :data:`PROBE_TOKENS` tokens), stops it; the ``current`` server marker is left as it was.
    Returns one observation per prompt. Raises :class:`TuningError` when a request fails,
    ``ServerError`` when the server does not start.
    """
    probing = plan.model_copy(update={"draft_n_max": n_max, "extra_flags": (
        *plan.extra_flags, "--alias", f"dflash-agent-probe-{os.getpid()}")})
    out = []
    with keep_current_marker():
        state, _ = up(probing, port=pick_port(DEFAULT_HOST, 0), timeout=timeout,
                      progress=note)
        try:
            with httpx2.Client(timeout=timeout) as client:
                for text in PROBE_PROMPTS:
                    body = {**state.request_extra,
                            "messages": [{"role": "user", "content": text}],
                            "max_tokens": PROBE_TOKENS, "temperature": temperature,
                            "cache_prompt": False}
                    try:
                        resp = client.post(state.base_url + "/v1/chat/completions", json=body)
                        t = resp.json().get("timings")
                    except (httpx2.HTTPError, ValueError, AttributeError) as exc:
                        raise TuningError(f"a probe request failed: {exc} "
                                          f"(log: {state.log})") from exc
                    if resp.status_code != 200 or not isinstance(t, dict):
                        raise TuningError(f"a probe request got HTTP {resp.status_code} "
                                          f"without timings (log: {state.log})")
                    try:
                        out.append(Observation(
                            source="probe", n_max=n_max, draft_n=int(t.get("draft_n") or 0),
                            accepted=int(t.get("draft_n_accepted") or 0),
                            tokens=int(t.get("predicted_n") or 0),
                            decode_ms=float(t.get("predicted_ms") or 0.0),
                            at=datetime.now(UTC), temperature=temperature))
                    except (TypeError, ValueError) as exc:
                        raise TuningError(f"a probe request got malformed timings: "
                                          f"{exc}") from exc
        finally:
            stop(state)
    return out


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def tune(plan: LaunchPlan, *, synth_p: float | None = None, allow_probe: bool = True,
         timeout: float = 600.0, note: Callable[[str], None] | None = None,
         temperature: float | None = None) -> tuple[LaunchPlan, Tuning | None]:
    """``plan`` with the draft length of a tuned profile chosen (0 = off), and the choice.

    Untuned profiles, plans without a draft, plans whose length is already set and
    ``dflash+ngram`` on BeeLlama <= 0.3 (its launch is refused) come back unchanged with None
    (BeeLlama <= 0.3 is tuned too: module docstring). ``synth_p`` (a benchmark's
    synthetic acceptance) replaces measured acceptance. Otherwise a probe runs first when one is due
    (:func:`probe_due`) and ``allow_probe`` (``--print-cmd`` never launches: it shows what is
    stored); a probe plan the fit check refuses is not started. The choice reads the draft model's
    own record (for ``dflash+ngram`` too: its n-gram drafts are not the draft's), only the
    observations of requests sampled like ``temperature``'s (:func:`same_sampling`; None: all),
    and a probe runs at that temperature. A probe that fails turns drafting off for this launch,
    said through ``note``; it never stops one.
    """
    profile = get_profile(plan.profile)
    if not profile.tuned or plan.draft is None or plan.draft_n_max is not None:
        return plan, None
    if "ngram-mod" in profile.spec_types and _is_bee_old(plan.binary):
        # server_argv refuses dflash+ngram on bee-old at any length: no probe server (minutes
        # for a large target) nor a stored outcome for a launch that cannot happen.
        return plan, None
    off_label = ("draft model off (n-gram lookup only)" if "ngram-mod" in profile.spec_types
                 else "drafting off")
    longest = profile.draft_n_max or 15
    costs = load_costs(plan, device_id(plan.binary), note)
    if synth_p is not None:
        choice = choose(costs, synth_p, max_n=longest)
        choice = choice.model_copy(update={"reason": "synthetic " + choice.reason,
                                           "off_label": off_label})
        return _launch(plan, choice, longest)
    draft_only = plan.model_copy(update={"profile": "dflash-fixed"})
    observations = at_temperature(load_observations(draft_only, note), temperature)
    if probe_due(observations) and allow_probe:
        k = max((k for k in costs.step_ratio if k <= longest), default=longest)
        failed = None
        try:
            check_fit(draft_only.model_copy(update={"draft_n_max": k}), note=note)
            if note:
                note(f"probing the draft's acceptance at length {k} (two short requests)")
            new = probe(draft_only, k, timeout, note, temperature=temperature or 0.0)
        except (TuningError, ServerError, FitError) as exc:
            failed = f"the acceptance probe failed ({_first_line(exc)})"
        if failed:
            with contextlib.suppress(TuningError):
                record(draft_only, [Observation(source="probe", n_max=k, draft_n=0,
                                                accepted=0, at=datetime.now(UTC),
                                                failed=failed, temperature=temperature)])
            off = Tuning(n_max=0, costs=costs.source, reason=failed, off_label=off_label)
            return plan.model_copy(update={"draft_n_max": 0}), off
        try:
            record(draft_only, new)
        except TuningError as exc:  # the probe's result still decides this launch
            if note:
                note(f"could not store the probe's result: {_first_line(exc)}")
        observations = observations + new
    p = estimate_p(observations)
    newest = max(observations, key=lambda o: o.at, default=None)
    if p is None and newest is not None and newest.failed:
        again = newest.at + REPROBE_AFTER
        off = Tuning(n_max=0, costs=costs.source, off_label=off_label,
                     reason=f"{newest.failed} at {newest.at:%Y-%m-%d %H:%M} UTC; probed again "
                            f"after {again:%Y-%m-%d %H:%M} UTC")
        return plan.model_copy(update={"draft_n_max": 0}), off
    choice = choose(costs, p, observations, max_n=longest)
    choice = choice.model_copy(update={"off_label": off_label})
    pending = probe_due(observations) and not allow_probe
    if pending:
        choice = choice.model_copy(update={
            "reason": choice.reason + "; the launch probes the draft first and may choose "
                                      "otherwise"})
    return _launch(plan, choice, longest, pending=pending)


def _is_bee_old(binary: Path) -> bool:
    """Whether ``binary`` is BeeLlama <= 0.3 (False when it cannot run: its launch says why)."""
    try:
        return detect_flavour(binary) == "bee-old"
    except (OSError, subprocess.SubprocessError):
        return False


def _launch(plan: LaunchPlan, choice: Tuning, longest: int,
            pending: bool = False) -> tuple[LaunchPlan, Tuning]:
    """The plan to launch for ``choice``: the chosen length, or, on a server that takes the
    length per request (:func:`per_request_cap`), the draft loaded at ``longest`` with the
    choice carried by each request — except drafting off, which launches without the draft.
    A loaded draft costs even when no request drafts (its feature injection runs after every
    target batch): requests at ``speculative.n_max`` 0 decoded at 0.90x of a server without
    the draft and prefilled at 0.62x for SmolLM2 on an H200, 0.96x and 0.55x for the 7.4 B
    shape; 0.97-1.01x on the 2-core CPU with v1, 1.02x with v2 (benchmarks/RESULTS.md).
    Calibration's idle row (:attr:`CostModel.idle_ratio`) is not trusted for this: on the
    H200 it put v5 loaded and off at 1.01x of plain, and the benches that then kept it loaded
    ran 0.92-0.93x (2026-12-05; v4: 1.10x calibrated, 0.94x in the agent replay); a session
    whose requests turn drafting off later weighs it itself (:meth:`DraftCap.unload_due`).
    ``pending``: a command shown before the probe that decides (``--print-cmd``) is the
    drafting one, the draft loaded per request: the launch itself probes first. Drafting off
    near break-even (:meth:`Tuning.explores`) keeps the draft loaded too: the session's first
    requests measure it."""
    if per_request_cap(plan) and (choice.n_max > 0 or pending or choice.explores()):
        return (plan.model_copy(update={"draft_n_max": longest}),
                choice.model_copy(update={"per_request": True}))
    return plan.model_copy(update={"draft_n_max": choice.n_max}), choice


PREFILL_MIN_TOKENS = 32
"""New prompt tokens a request needs for its prefill rate to price a relaunch's prefill
(:attr:`DraftCap.reprefill_ms`): a few tokens time the request's overhead, not the rate."""


class DraftCap:
    """The draft length of each request to a server that takes it per request
    (:func:`per_request_cap`; the plan's ``draft_n_max`` is the longest a request may ask).

    Starts from what is stored for the draft (costs, observations) and re-chooses after every
    request it observes (:func:`choose` over the stored and the session's observations), so
    drafting turns off, on or to another length between two requests without a restart.
    While drafting is off no request drafts, so none says what the draft would do now: once a
    probe is due (:func:`probe_due`) the next request drafts :data:`TURN_PROBE_LENGTH` tokens
    and its acceptance decides again; and while off is predicted near break-even
    (:meth:`Tuning.explores`), requests draft the best predicted length until the session has
    decoded :data:`EXPLORE_TOKENS` tokens drafting. The session's observations are recorded
    by whoever ends a task (:meth:`save`). ``temperature``: the session's sampling temperature; only
    observations sampled like it count (:func:`same_sampling`), and its own are stored with it.
    ``source``: what its observations are stored as (``agent backend bench`` serves its
    requests through one too).
    """

    def __init__(self, plan: LaunchPlan, note: Callable[[str], None] | None = None,
                 temperature: float | None = None,
                 source: Literal["bench", "session"] = "session"):
        self.plan = plan
        self.temperature = temperature
        self.source: Literal["bench", "session"] = source
        self.longest = effective_n_max(plan)
        self.costs = load_costs(plan, device_id(plan.binary), note)
        # Off on this server keeps the draft loaded: where calibration measured that slower
        # than plain (0.85x on an H200, 2026-12-03), drafting is measured against it, not
        # against plain; a near-even draft that flipped off on one short answer left a whole
        # bench at 0.92x plain.
        self.off_speed = min(1.0, self.costs.idle_speed() or 1.0)
        self._draft_only = plan.model_copy(update={"profile": "dflash-fixed"})
        self._stored = at_temperature(load_observations(self._draft_only, note), temperature)
        self._new: list[Observation] = []
        self._recorded = 0
        self.loaded_off_ms = 0.0
        """Decode time (ms) of this session's requests that drafted nothing by choice, the draft
        loaded: what :meth:`unload_due` weighs against a relaunch."""
        self.reprefill_ms = 0.0
        """What processing the last request's whole prompt again would take (ms): its context,
        cached and new tokens, at the prefill rate last measured on :data:`PREFILL_MIN_TOKENS`
        new tokens or more (0 until one was). A relaunch starts with an empty cache."""
        self._prefill_ms_a_token: float | None = None
        self.keep_loaded = False
        """Set by a session that found it could not relaunch without the draft (another
        session uses the server): :meth:`unload_due` is then never due again."""
        self.choice = self._choose()

    def _choose(self) -> Tuning:
        observations = self._stored + self._new
        choice = choose(self.costs, estimate_p(observations), observations,
                        max_n=self.longest, off_speed=self.off_speed)
        return choice.model_copy(update={"per_request": True})

    def next_n_max(self, now: datetime | None = None) -> int:
        """The length the next request carries (``speculative.n_max``; 0 = no draft)."""
        if self.choice.n_max == 0 and probe_due(self._stored + self._new, now):
            return min(TURN_PROBE_LENGTH, self.longest)
        if self.choice.explores() and sum(o.tokens for o in self._new) < EXPLORE_TOKENS:
            return self.choice.best or 0
        return self.choice.n_max

    def observe(self, n_max: int, timings: dict | None) -> None:
        """Take one answered request: ``n_max`` the length it carried, ``timings`` the
        server's (``draft_n``, ``draft_n_accepted``, ``predicted_n``, ``predicted_ms``).
        A request that drafted nothing by choice (``n_max`` 0) says nothing about the draft;
        only its decode time is kept (:attr:`loaded_off_ms`). One without usable timings is
        skipped."""
        if not isinstance(timings, dict):
            return
        self._note_prefill(timings)
        if n_max <= 0:
            with contextlib.suppress(TypeError, ValueError):
                ms = float(timings.get("predicted_ms") or 0.0)
                if math.isfinite(ms) and ms > 0:
                    self.loaded_off_ms += ms
            return
        try:
            obs = Observation(source=self.source, n_max=n_max,
                              draft_n=int(timings.get("draft_n") or 0),
                              accepted=int(timings.get("draft_n_accepted") or 0),
                              tokens=int(timings.get("predicted_n") or 0),
                              decode_ms=float(timings.get("predicted_ms") or 0.0),
                              at=datetime.now(UTC), temperature=self.temperature)
        except (TypeError, ValueError, ValidationError):
            return  # a malformed timings object is not evidence either way
        self._new.append(obs)
        self.choice = self._choose()

    def _note_prefill(self, timings: dict) -> None:
        with contextlib.suppress(TypeError, ValueError):
            new, cached = int(timings.get("prompt_n") or 0), int(timings.get("cache_n") or 0)
            ms = float(timings.get("prompt_ms") or 0.0)
            if new >= PREFILL_MIN_TOKENS and math.isfinite(ms) and ms > 0:
                self._prefill_ms_a_token = ms / new
            if self._prefill_ms_a_token is not None and new >= 0 and cached >= 0:
                self.reprefill_ms = (new + cached) * self._prefill_ms_a_token

    def unload_due(self, relaunch_s: float | None) -> bool:
        """Whether the session should relaunch its server without the draft: its next request
        drafts nothing (drafting off, no probe due, done exploring), calibration measured the
        loaded draft under :data:`IDLE_FLOOR` of plain decoding, and what that cost this
        session so far, :attr:`loaded_off_ms` x (1 - off speed), has reached ``relaunch_s``,
        what starting the server took (None: unknown, never due), plus :attr:`reprefill_ms`.

        Keeping the draft loaded and off cost an H200 agent replay 6 % on 87 of its 88 turns
        (benchmarks/h200-first-2026-12-04); a relaunch costs a server start and one more
        prefill of the conversation. Relaunching once the loss has reached the price of a
        relaunch (the ski-rental rule) never costs more than twice what knowing the session's
        length in advance would: a short session does not pay for a relaunch it would not win
        back, a long one stops paying for the draft."""
        if (relaunch_s is None or self.keep_loaded or self.off_speed >= IDLE_FLOOR
                or self.next_n_max() != 0):
            return False
        price = relaunch_s + self.reprefill_ms / 1000.0
        return self.loaded_off_ms / 1000.0 * (1.0 - self.off_speed) >= price

    def save(self) -> None:
        """Store the observations made since the last save (:func:`record`), for the next
        sessions and launches; raises :class:`TuningError` when the record cannot be
        written."""
        new, self._recorded = self._new[self._recorded:], len(self._new)
        record(self._draft_only, new)


def _length_text(n_max: int | None) -> str:
    return "no draft" if n_max == 0 else f"draft length {n_max}"


def stale_note(serving: LaunchPlan, wanted: LaunchPlan,
               temperature: float | None = None) -> str | None:
    """A note when the running server (``serving``) drafts another length than the stored
    measurements now choose for ``wanted`` (an untuned plan of the same preset) at
    ``temperature``: the length changes only at a launch, so the user is told how to get one.
    None when they agree."""
    if per_request_cap(serving):
        speed = loaded_off_speed(serving, wanted, temperature)
        if speed is None:
            return None
        return (f"what is measured now turns drafting off, but the running server keeps the "
                f"draft loaded, where calibration measured it decoding at {speed:.2f}x of a "
                "server without it (`agent backend down`, then the next command launches "
                "without the draft)")
    choice = stored_choice(wanted, temperature)
    if choice is None or choice.n_max == serving.draft_n_max:
        return None
    return (f"the running server has {_length_text(serving.draft_n_max)}; what is measured now "
            f"chooses {choice.line()} (`agent backend down`, then the next command relaunches "
            "with it)")


def loaded_off_speed(serving: LaunchPlan, wanted: LaunchPlan,
                     temperature: float | None = None) -> float | None:
    """How fast the running server of ``serving`` decodes, relative to a server without the
    draft, when what is stored now turns drafting off for ``wanted`` (an untuned plan of the
    same preset) at ``temperature`` while that server keeps its draft loaded (it takes its
    length per request) and calibration measured the loaded draft under :data:`IDLE_FLOOR`;
    None otherwise (drafting on or explored, the loaded draft free or never measured, a
    server without the per-request cap).

    Its requests turn drafting off without a restart, but the loaded draft still costs: an
    H200 agent replay went off after its first turn and decoded the other 87 at 0.94x of
    baseline (benchmarks/h200-first-2026-12-04)."""
    if not per_request_cap(serving):
        return None
    choice = stored_choice(wanted, temperature)
    speed = load_costs(serving, device_id(serving.binary)).idle_speed()
    if (choice is None or choice.n_max or choice.per_request or speed is None
            or speed >= IDLE_FLOOR):
        return None
    return speed


def stored_choice(plan: LaunchPlan, temperature: float | None = None) -> Tuning | None:
    """What a launch of ``plan`` would choose from what is stored (no probe) for requests at
    ``temperature`` (None: whatever was observed); None for untuned profiles. For ``backend
    status`` and for noticing that a running server's length is no longer the one the
    measurements choose."""
    return tune(plan.model_copy(update={"draft_n_max": None}), allow_probe=False,
                temperature=temperature)[1]
