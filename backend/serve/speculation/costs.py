"""The cost model of speculation and the choice it makes, pure: nothing here reads or writes.

The model (docs/design/speculation-costs.md). A speculative step with K drafted tokens costs
``r(K)`` plain decode steps (measured by ``agent backend calibrate`` with synthetic acceptance, or a
stated default). A draft whose tokens are each accepted with probability ``p`` yields
``1 + p + … + p^K`` tokens per step, so its speedup over plain decoding is::

    S(K, p) = e(K) · (1 + p + … + p^K) / r(K)

where ``e(K)`` (≤ 1) is what calibration measured at a partial acceptance against that formula
(partial acceptance has costs the formula leaves out: the design page's "Step costs"). The launch
drafts with the K of the best S, or not at all when no K is predicted to beat plain decoding by
:data:`MARGIN`; when a K has been *measured* on the user's own traffic (decode tok/s against the
calibrated plain rate) the measured figure is used when it is the lower one.

``p`` comes from observations of the draft (``draft_n`` / ``draft_n_accepted`` at a known K;
a length observed on enough text of its own is predicted from those alone,
:func:`length_estimates`): a probe at launch (:func:`~backend.serve.speculation.probe.probe`, a
few short requests on a server with the draft), ``agent backend bench`` runs and the agent's own
turns (recorded at the end of each session). When
drafting is off no observation arrives, so the next launch probes again once the last probe is
:data:`~backend.serve.speculation.probe.REPROBE_AFTER` old: drafting comes back when a probe says
it would pay.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field, field_validator

MARGIN = 1.05
"""Drafting must be predicted to beat plain decoding by 5 %: the model is measured to within
~10 %, and a draft that only breaks even costs memory and risk for nothing."""

IDLE_FLOOR = 0.99
"""A server keeping its draft loaded while no request drafts must decode at this share of a server
without the draft, measured (``agent backend calibrate``), for drafting off to stay per request;
otherwise off launches without the draft. Never slower is the promise, and calibrate reads this
cost low: a draft it put just above 0.97, the floor until then, stayed loaded and ran benches
slower than that (docs/performance.md, "What the tuning's thresholds rest on")."""

EXPLORE_FROM = MARGIN - 0.10
"""With drafting off but predicted within 10 % under :data:`MARGIN`, a server that takes its length
per request keeps the draft loaded and a session's first requests draft the best predicted length
(:class:`DraftCap`), so that the session's own text decides. The launch probe reads acceptance to
about ±0.1 a token, about ±10 % of predicted speedup near break-even: a launch that read off there
has left a draft that pays unused (docs/performance.md, "What the tuning's thresholds rest
on")."""

EXPLORE_TOKENS = 256
"""Tokens a session decodes while exploring (:data:`EXPLORE_FROM`) before its choice rests on
what it measured: about as much text as the launch probe's 2 x :data:`PROBE_TOKENS`, so that
the session's own weighs about as much (:func:`estimate_p` weights by tokens decoded)."""


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

        One synthetic check per length is too noisy to rank lengths by: it moved by up to 0.2
        between calibrations of one server, more than real drafts' costs differ between
        lengths, and the median made those calibrations agree
        (docs/performance.md, "What the tuning's thresholds rest on")."""
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
    probes always ran at temperature 0, and reading such a record for sampled requests ran slower
    than plain (docs/performance.md, "What the tuning's thresholds rest on"); sampled requests
    probe anew instead."""
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

    A DFlash draft predicts a block's positions at once, and the later ones are right less often:
    one acceptance per token fitted at a short length promises too much at a long one
    (docs/performance.md, "What the tuning's thresholds rest on"). A length measured on its own
    keeps its own figure; the others take the pooled one."""
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
"""A request counts towards a measured speedup (:func:`_measured_speedups`) from this many tokens:
a short answer decodes slower than the calibrated rate whatever drafts it, and one such answer once
turned drafting off for a whole bench (docs/performance.md, "What the tuning's thresholds rest
on")."""

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
        # lost to an untried one at its full prediction, which then ran slower
        # (docs/performance.md, "What the tuning's thresholds rest on").
        realised = scores[held] / predicted[held]
        scores.update({k: predicted[k] * realised for k in lengths if k not in tried})
    best = max(lengths, key=lambda k: (scores[k], -k))
    if held is not None and best not in tried and scores[best] < MARGIN * scores[held]:
        # An untried length rests on acceptance pooled over the others, which a short length's
        # early block positions flatter: it must beat the best length measured on its own text
        # by the margin drafting must beat plain decoding by, or the choice hops between
        # lengths on noise (same table: an agent replay that went 2 -> 5 -> 7).
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
