"""The draft length per request on a server that takes it per request: chosen again after
every request from the stored observations and the session's own."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

from pydantic import ValidationError

from backend.serve.profiles import LaunchPlan
from backend.serve.speculation.costs import (
    EXPLORE_TOKENS,
    IDLE_FLOOR,
    Observation,
    Tuning,
    at_temperature,
    choose,
    estimate_p,
)
from backend.serve.speculation.probe import probe_due
from backend.serve.speculation.store import (
    device_id,
    effective_n_max,
    load_costs,
    load_observations,
    record,
)

TURN_PROBE_LENGTH = 3
"""Draft length of a request that probes the draft in a session (drafting off, a probe due, on a
server that takes its length per request): the probe is a real turn, so a short draft, which
costs ~3 plain steps a step on a CPU when nothing is accepted against ~8 at 15; the per-token
acceptance it measures stands for every length, as the launch probe's does."""

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
        # than plain, drafting is measured against it, not against plain; a near-even draft
        # that flipped off on one short answer left a whole bench slower than plain
        # (docs/performance.md, "What the tuning's thresholds rest on").
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

        Keeping the draft loaded and off costs every turn (docs/performance.md, "What the
        tuning's thresholds rest on": the agent replay); a relaunch costs a server start and
        one more prefill of the conversation. Relaunching once the loss has reached the price of a
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
