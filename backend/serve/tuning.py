"""The tuning decision: the draft length a speculative launch uses (0 = off), chosen from the
stored costs and acceptance (:mod:`backend.serve.speculation`), probing first when due, and
whether a running server's length is still the one they choose.

"Off" means no draft block is decoded. A confidence cut (``--spec-draft-p-min``) is not an off
switch — the draft's forward pass still runs every step (docs/design/speculation-costs.md, "Off"
means no draft pass) — so off is either a server without the draft (``dflash`` runs plain,
``dflash+ngram`` n-gram lookup only) or, on an engine built with the product's patch, a request
that carries ``speculative.n_max`` 0.

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
later request drafts with the whole context. On the 2-core CPU that is a true off within the
noise, and a length that changes between two requests without a restart
(``benchmarks/draft_cap.py``; docs/performance.md, "What the tuning's thresholds rest on").
That injection is not free everywhere (a GPU pays for it), and calibration's idle row does not
tell where (same table). So a launch that chooses off starts without the draft; a session whose
requests turn drafting off later keeps it loaded until it has cost a relaunch
(:meth:`DraftCap.unload_due`, where calibration measured it under :data:`IDLE_FLOOR` of plain).

So on a patched engine the tuned ``dflash`` profile (:func:`per_request_cap`) launches with the
draft loaded at the longest length when it drafts (or when drafting is predicted near break-even:
:data:`EXPLORE_FROM`), and :class:`DraftCap` chooses each request's length (0 = off) from the
stored observations and the session's own, re-choosing after every request, against what off costs
on that server (the loaded draft's measured idle cost, not plain decoding); while off, a request
drafts :data:`TURN_PROBE_LENGTH` tokens once a probe is due, and its acceptance decides again.
Elsewhere (an engine without the patch: a user's own build, one built before the patch;
``dflash+ngram``, whose n-gram drafts a per-request cap would cut too) the length is per server: a
re-choice takes effect at the next launch, between tasks, never mid-turn, and off is a launch
without the draft. BeeLlama <= 0.3 is tuned the same way, per launch: its own ``profit`` controller
(on by default) ran far slower than plain decoding without ever turning drafting off
(docs/performance.md, "BeeLlama v0.3.1"), so a length the product chose is launched with that
controller off (:func:`backend.serve.profiles.server_argv`), and ``dflash-fixed`` keeps the
engine's defaults as the reference. Observations carry the sampling temperature of their requests,
and a choice reads only those of its own kind, greedy (0) or sampled (above 0): a length chosen
from greedy acceptance loses under sampling (docs/performance.md, "What the tuning's thresholds
rest on"). Nothing else is chosen per kind of turn: a turn's kind shows only in what it decodes,
after its length was sent. ``--spec-draft-p-min`` stays 0: choosing a cut needs the draft's
confidence on real text, which synthetic acceptance cannot give, and a cut does not remove the
draft pass's cost.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from backend.engine.flavour import detect_flavour
from backend.models.presets import NgramLengths
from backend.serve.fit import FitError, check_fit
from backend.serve.profiles import LaunchPlan, get_profile
from backend.serve.records import ServerError
from backend.serve.speculation.control import per_request_cap
from backend.serve.speculation.costs import (
    IDLE_FLOOR,
    Observation,
    Tuning,
    at_temperature,
    choose,
    estimate_p,
)
from backend.serve.speculation.probe import REPROBE_AFTER, probe, probe_due
from backend.serve.speculation.store import (
    TuningError,
    device_id,
    load_costs,
    load_observations,
    record,
)

NGRAM_GPU = NgramLengths(n_match=6, n_min=2, n_max=64)
"""ngram-mod's lengths where the target decodes on a GPU (llama.cpp's are 24 / 48 / 64).

The agent copies snippets shorter than a 24-token key waits for, so on its own turns lookups
that start after 6 matching tokens and draft from 2 pay on a GPU, which verifies a long draft
(n_max 64) for little; on a CPU every drafted token costs, so it keeps llama.cpp's
(docs/performance.md, "n-gram lookup"; benchmarks/RESULTS.md, section "n-gram lookup's
lengths, a never-slower guard, and the per-request cap on a GPU")."""


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
    target batch), and calibration's idle row (:attr:`CostModel.idle_ratio`) is not trusted
    to say how much: it has read near plain where benches with the draft loaded ran slower
    (docs/performance.md, "What the tuning's thresholds rest on"); a session whose requests
    turn drafting off later weighs it itself (:meth:`DraftCap.unload_due`).
    ``pending``: a command shown before the probe that decides (``--print-cmd``) is the
    drafting one, the draft loaded per request: the launch itself probes first. Drafting off
    near break-even (:meth:`Tuning.explores`) keeps the draft loaded too: the session's first
    requests measure it."""
    if per_request_cap(plan) and (choice.n_max > 0 or pending or choice.explores()):
        return (plan.model_copy(update={"draft_n_max": longest}),
                choice.model_copy(update={"per_request": True}))
    return plan.model_copy(update={"draft_n_max": choice.n_max}), choice


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

    Its requests turn drafting off without a restart, but the loaded draft still costs
    (docs/performance.md, "What the tuning's thresholds rest on": the agent replay with the
    draft loaded and off)."""
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
