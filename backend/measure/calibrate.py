"""``agent backend calibrate``: what a speculative step costs on this engine, target, draft and
device, measured and stored for the tuned launch (:mod:`backend.serve.tuning`).

Method (docs/design/speculation-costs.md): one server per configuration, each started, warmed up and
asked ``repeats`` times for ``tokens`` tokens (``ignore_eos``, temperature 0, no prompt cache); the
median request counts. First plain decoding, then for each draft length K a server drafting K
tokens with synthetic acceptance ``--spec-synth-rates 0,…,0`` (nothing accepted: the pure cost
of a step with K drafted tokens), and — when ``check_p`` is set — one with rates
``p, p², …, p^K`` (each drafted token accepted with probability p), whose measured speedup
against the formula gives the efficiency at partial acceptance. The same per-position profile
at every K makes lengths compare fairly.

An engine without ``--spec-synth-rates`` (BeeLlama, older builds) gets the stated fallback: the
real draft is timed at each length (a step's time is decode time over steps, steps = tokens −
accepted), and no efficiency is measured. On BeeLlama <= 0.3 each length is drafted as asked:
the product turns its adaptive controller off whenever it sets the length
(:func:`backend.serve.profiles.server_argv`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import httpx2
from pydantic import BaseModel, Field

from backend.engine.flavour import binary_facts
from backend.engine.registry import Engine
from backend.errors import EXIT_USAGE, StatedError
from backend.home import home
from backend.measure.report import save_png
from backend.models.presets import Preset
from backend.serve import pipeline
from backend.serve.pipeline import LaunchRequest
from backend.serve.process import DEFAULT_HOST, pick_port, stop
from backend.serve.profiles import LaunchPlan, get_profile
from backend.serve.records import ServerError, ServerState, keep_current_marker
from backend.serve.speculation.control import takes_length_per_request
from backend.serve.speculation.costs import CostModel, synth_rates, tokens_per_step
from backend.serve.speculation.store import device_id, engine_key, file_id, save_costs

DEFAULT_LENGTHS = (1, 2, 3, 5, 7, 15)
DEFAULT_CHECK_P = 0.75
MAX_DRIFT = 0.15
"""Plain decoding measured first and last may differ by this share; more means the machine's
speed changed during the run, and nothing is stored."""
MIN_RATIO = 0.95
"""A step with drafted tokens verifies more tokens and runs the draft too: measured cheaper
than this share of a plain step, the run is refused."""
MIN_EFFICIENCY, MAX_EFFICIENCY = 0.6, 1.25
"""Measured speedup at the check acceptance over the formula's, outside which the run is
refused (the H200's figures: docs/design/speculation-costs.md, "Step costs"); far outside it
is what a busy machine measures."""
MIN_TOKENS = 64
"""Tokens a timed request decodes at least (and the first plain measurement's length)."""
MAX_TOKENS = 512
"""Tokens a timed request decodes at most when the length is chosen from the plain speed."""
REQUEST_SECONDS = 0.5
"""How long a timed request should decode when the length is chosen from the plain speed: a request
of 64 tokens on a fast GPU lasts so few milliseconds that launch and scheduling noise moved a
length's cost enough to change the tuned length (docs/performance.md, "What the tuning's thresholds
rest on")."""


def request_tokens(plain_tok_s: float) -> int:
    """Tokens each timed request decodes: :data:`REQUEST_SECONDS` of plain decoding at
    ``plain_tok_s`` (tokens/s), within [:data:`MIN_TOKENS`, :data:`MAX_TOKENS`], rounded to 16.
    """
    wanted = plain_tok_s * REQUEST_SECONDS if math.isfinite(plain_tok_s) else MAX_TOKENS
    return int(min(MAX_TOKENS, max(MIN_TOKENS, round(wanted / 16) * 16)))


PROMPT = ("Write a Python module with a function `parse_csv(text)` that parses CSV text into a "
          "list of dicts, handling quoted fields, and tests for it.")


IDLE_ROW = "draft loaded, off"
"""The row of a server holding the draft while its requests draft nothing."""


class CalibrationError(StatedError, RuntimeError):
    """Calibration could not run (no draft, an unsupported profile or engine, a server that
    failed); the message says why."""

    plain = True


class CalibrationUsage(CalibrationError):
    """The command line asks for something calibration cannot do (bad lengths, a profile
    without a draft model, a preset without a draft, a BeeLlama <= 0.3 engine)."""

    exit_code = EXIT_USAGE


class Row(BaseModel):
    """One measured configuration."""

    name: str = Field(description="'plain', 'K=3', 'K=3 p=0.75'.")
    n_max: int = Field(description="Draft length (0 for plain).")
    synth_p: float | None = Field(description="Synthetic per-token acceptance (None: real).")
    tokens: int = Field(description="Tokens decoded by the median request.")
    accepted: int
    drafted: int
    decode_ms: float
    step_ms: float = Field(description="decode_ms / steps; steps = tokens − accepted.")
    tok_s: float


class Calibration(BaseModel):
    """A calibration run: its rows and the cost model stored from them."""

    preset: str
    profile: str
    engine: str
    costs: CostModel
    rows: list[Row]
    stored: Path | None = None

    def plain(self) -> Row:
        """The plain-decoding row."""
        return next(r for r in self.rows if r.n_max == 0)

    def checked(self, k: int) -> Row | None:
        """The row at length ``k`` under the check acceptance, if measured."""
        return next((r for r in self.rows if r.n_max == k and r.synth_p), None)


def parse_lengths(spec: str) -> tuple[int, ...]:
    """``"1,3,7,15"`` → ``(1, 3, 7, 15)``; raises :class:`CalibrationError` for anything but
    distinct lengths in 1..15."""
    try:
        values = sorted({int(v) for v in spec.split(",") if v.strip()})
    except ValueError as exc:
        raise CalibrationUsage(f"--lengths '{spec}': expected numbers like 1,3,7,15") from exc
    if not values or any(not 1 <= v <= 15 for v in values):
        raise CalibrationUsage(f"--lengths '{spec}': give draft lengths in 1..15")
    return tuple(values)


def _request(client: httpx2.Client, state: ServerState, tokens: int,
             extra: dict | None = None) -> dict:
    body = {**state.request_extra, "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": tokens, "temperature": 0.0, "cache_prompt": False,
            "ignore_eos": True, **(extra or {})}
    try:
        resp = client.post(state.base_url + "/v1/chat/completions", json=body)
        data = resp.json()
    except (httpx2.HTTPError, ValueError) as exc:
        raise CalibrationError(f"the calibration server at {state.base_url} failed: {exc} "
                               f"(log: {state.log})") from exc
    timings = data.get("timings") if isinstance(data, dict) else None
    if resp.status_code != 200 or not isinstance(timings, dict):
        raise CalibrationError(f"the calibration server answered HTTP {resp.status_code} "
                               f"without timings (log: {state.log})")
    return timings


def _measure(name: str, plan: LaunchPlan, n_max: int, synth_p: float | None, tokens: int,
             repeats: int, request: LaunchRequest,
             note: Callable[[str], None], extra: dict | None = None) -> Row:
    note(f"measuring {name}")
    state, _ = pipeline.start(plan, replace(request, port=pick_port(DEFAULT_HOST, 0)), note)
    try:
        with httpx2.Client(timeout=httpx2.Timeout(connect=10.0, read=1800.0, write=60.0,
                                                  pool=10.0)) as client:
            _request(client, state, 8, extra)  # warm-up: weights paged in, buffers allocated
            runs = [_request(client, state, tokens, extra) for _ in range(repeats)]
    finally:
        stop(state)
    rates = [(t.get("predicted_n") or 0) / (t.get("predicted_ms") or 1e-9) for t in runs]
    t = runs[rates.index(statistics.median_low(rates))]
    n = int(t.get("predicted_n") or 0)
    accepted = int(t.get("draft_n_accepted") or 0)
    ms = float(t.get("predicted_ms") or 0.0)
    if n <= 0 or ms <= 0:
        raise CalibrationError(f"{name}: the server decoded nothing (log: {state.log})")
    return Row(name=name, n_max=n_max, synth_p=synth_p, tokens=n, accepted=accepted,
               drafted=int(t.get("draft_n") or 0), decode_ms=ms,
               step_ms=ms / max(1, n - accepted), tok_s=n / ms * 1000.0)


def calibrate(preset: Preset, engine: Engine, *, profile: str = "dflash",
              lengths: tuple[int, ...] = DEFAULT_LENGTHS,
              check_p: float | None = DEFAULT_CHECK_P, tokens: int | None = None,
              repeats: int = 3,
              ctx_size: int | None = 4096, start_timeout: float = 600.0, force: bool = False,
              store: bool = True,
              note: Callable[[str], None] | None = None) -> Calibration:
    """Measure plain decoding and a speculative step at each of ``lengths`` for ``preset``'s
    target and draft on ``engine``; store the cost model (unless ``store`` is False).

    On an engine that takes the draft length per request (the product's build), the tuned
    ``dflash`` profile's off state is measured too: the draft loaded, every request at
    ``speculative.n_max`` 0 (``CostModel.idle_ratio``: a session that turns drafting off keeps
    the draft loaded where that is nearly free). Costs are stored per engine key, target,
    draft and device
    (:func:`tuning.save_costs`).
    ``tokens``: decoded per timed request; None: :func:`request_tokens` of the first plain
    measurement's speed. That first measurement is the machine's warm-up and is not kept:
    plain decoding is measured again, and last; a run whose plain speed drifted more than
    :data:`MAX_DRIFT`, or whose rows contradict the cost formula, stores nothing.
    Raises :class:`CalibrationError` (no draft, ngram profile, bee-old, a server that failed,
    a run that does not hold together),
    ``FitError``, ``ModelError``, ``PresetError`` or ``TuningError``.
    """
    say = note or (lambda _msg: None)
    if profile not in ("dflash", "dflash-fixed", "dflash+ngram"):
        raise CalibrationUsage(f"calibrate measures draft-model steps (dflash profiles); the "
                               f"{profile} profile drafts only where its n-gram lookup finds "
                               "a match, so measure it with `agent backend bench`")
    if not preset.draft:
        raise CalibrationUsage(f"preset '{preset.name}' has no draft model to calibrate")
    synthetic = binary_facts(engine.binary).has("--spec-synth-rates")
    if not synthetic:
        say("this engine has no --spec-synth-rates: timing the real draft at each length "
            "instead (step costs only, no efficiency check)")
    # dflash+ngram would consult n-grams first; the step being measured is the draft model's.
    request = LaunchRequest(preset, profile="dflash-fixed", ctx_size=ctx_size, force=force,
                            timeout=start_timeout)
    spec = pipeline.resolve(request, engine=engine, note=note).plan
    plain = spec.model_copy(update={"profile": "baseline", "draft": None})
    pipeline.fit(spec, request, note)

    def tagged(plan: LaunchPlan, name: str, *flags: str) -> LaunchPlan:
        alias = ("--alias", f"dflash-agent-calibrate-{name.replace(' ', '-')}")
        return plan.model_copy(update={"extra_flags": (*plan.extra_flags, *flags, *alias)})

    chosen_tokens = tokens or MIN_TOKENS
    args = (chosen_tokens, repeats, request, say)

    def at_length(k: int) -> list[Row]:
        """The rows of length ``k``: nothing accepted, then the check acceptance."""
        at_k = spec.model_copy(update={"draft_n_max": k})
        zero = ("--spec-synth-rates", synth_rates(0.0, k)) if synthetic else ()
        out = [_measure(f"K={k}", tagged(at_k, f"k{k}", *zero), k, 0.0 if synthetic else None,
                        *args)]
        if synthetic and check_p is not None:
            out.append(_measure(f"K={k} p={check_p:g}", tagged(at_k, f"k{k}-p",
                                "--spec-synth-rates", synth_rates(check_p, k)), k, check_p,
                                *args))
        return out

    try:
        with keep_current_marker():
            # The first launch warms the machine up and is not kept: on an idle 2-core CI
            # machine a cold first plain run was slower than the same plain at the end by more
            # than MAX_DRIFT, and the drift check refused the run (docs/performance.md, "What
            # the tuning's thresholds rest on").
            first = _measure("plain", tagged(plain, "plain"), 0, None, *args)
            if tokens is None and request_tokens(first.tok_s) != chosen_tokens:
                chosen_tokens = request_tokens(first.tok_s)
                args = (chosen_tokens, *args[1:])
                say(f"plain decodes {first.tok_s:.0f} tok/s: timing {chosen_tokens} tokens "
                    "a request")
            rows = [_measure("plain", tagged(plain, "plain"), 0, None, *args)]
            for k in lengths:
                rows += at_length(k)
            idle = None
            if profile == "dflash" and takes_length_per_request(engine.binary):
                # What keeping drafting off without a restart costs: the draft loaded, every
                # request at speculative.n_max 0 (its features are still injected each batch).
                loaded = spec.model_copy(update={"draft_n_max": max(lengths)})
                idle = _measure(IDLE_ROW, tagged(loaded, "idle"), 0, None, *args,
                                extra={"speculative.n_max": 0})
                rows.append(idle)
            # Plain again at the end: a machine whose speed changed meanwhile (another job, a
            # throttled CPU) would make every ratio wrong, and a launch would trust them.
            again = _measure("plain (again)", tagged(plain, "plain"), 0, None, *args)
            rows.append(again)
            suspect = _suspect_lengths(rows)
            if suspect:
                # One length out of line with the others is what a few seconds of another
                # job make (seen on an idle 2-core VM): it is measured once more before the
                # run is refused.
                say(f"{', '.join(f'K={k}' for k in suspect)} out of line with the rest: "
                    "measuring again")
                for k in suspect:
                    redone = iter(at_length(k))
                    rows = [next(redone) if r.n_max == k else r for r in rows]
    except ServerError as exc:
        raise CalibrationError(str(exc)) from exc
    rows[0], ratios, efficiency, problems = summarize(rows)
    if problems:
        raise CalibrationError("the measurements do not hold together (" + "; ".join(problems)
                               + "): something else probably used this machine; nothing was "
                               "stored; calibrate again when it is idle")
    device = device_id(engine.binary)
    if not spec.model.is_file() or (spec.draft and not spec.draft.is_file()):
        raise CalibrationError("a model file went away during calibration; nothing was stored")
    costs = CostModel(source="calibrated", engine=engine_key(engine.binary),
                      model=file_id(spec.model), draft=file_id(spec.draft) if spec.draft else "-",
                      device=device, plain_ms=rows[0].step_ms, step_ratio=ratios,
                      efficiency=efficiency, check_p=check_p if efficiency else None,
                      synthetic=synthetic, measured_at=datetime.now(UTC),
                      idle_ratio=idle.step_ms / rows[0].step_ms if idle else None)
    stored = save_costs(costs, spec) if store else None
    return Calibration(preset=preset.name, profile=get_profile(profile).name,
                       engine=engine.key, costs=costs, rows=rows, stored=stored)


def _checked(rows: list[Row]) -> tuple[Row, dict[int, float], dict[int, float],
                                        list[tuple[int | None, str]]]:
    """:func:`summarize`, with each problem's length (None: the plain rows drifted)."""
    first, last = rows[0], rows[-1]
    problems: list[tuple[int | None, str]] = []
    drift = abs(last.step_ms - first.step_ms) / first.step_ms
    if drift > MAX_DRIFT:
        problems.append((None, f"plain decoding ran at {first.tok_s:.1f} tok/s first and "
                               f"{last.tok_s:.1f} at the end"))
    plain_ms = (first.step_ms + last.step_ms) / 2
    plain = first.model_copy(update={"name": "plain (mean of first and last)",
                                     "step_ms": plain_ms, "tok_s": 1000.0 / plain_ms})
    ratios = {r.n_max: r.step_ms / plain_ms for r in rows if r.n_max and not r.synth_p}
    problems += [(k, f"K={k} costs {r:.2f}x a plain step") for k, r in ratios.items()
                 if r < MIN_RATIO]
    efficiency: dict[int, float] = {}
    for row in rows:
        if row.n_max and row.synth_p:
            predicted = tokens_per_step(row.synth_p, row.n_max) / ratios[row.n_max]
            measured = row.tok_s / plain.tok_s
            if not MIN_EFFICIENCY <= measured / predicted <= MAX_EFFICIENCY:
                problems.append((row.n_max, f"K={row.n_max} at p={row.synth_p:g} ran "
                                            f"{measured:.2f}x where its step cost predicts "
                                            f"{predicted:.2f}x"))
            # Capped at 1: noise must not make the model more optimistic than the formula.
            efficiency[row.n_max] = min(1.0, measured / predicted)
    return plain, ratios, efficiency, problems


def summarize(rows: list[Row]) -> tuple[Row, dict[int, float], dict[int, float], list[str]]:
    """From measured rows (plain first, plain again last): the plain row (mean of both), the
    step cost per length in plain steps, the efficiency per checked length (capped at 1), and
    what does not hold together — plain speed drifting more than :data:`MAX_DRIFT`, a step
    cheaper than a plain one, a checked speedup outside :data:`MIN_EFFICIENCY` ..
    :data:`MAX_EFFICIENCY` of the formula's. Pure."""
    plain, ratios, efficiency, problems = _checked(rows)
    return plain, ratios, efficiency, [text for _, text in problems]


def _suspect_lengths(rows: list[Row]) -> list[int]:
    """The lengths whose rows contradict the others, when plain decoding held steady (a
    machine that changed speed throughout is not mended by measuring one length again).
    Pure."""
    problems = _checked(rows)[3]
    if any(k is None for k, _ in problems):
        return []
    return sorted({k for k, _ in problems if k is not None})


_GRID = (0.5, 0.75, 0.9)


def table_lines(cal: Calibration) -> list[str]:
    """The calibration as ≤ 80-column lines: per length the step cost, the predicted speedup
    at three acceptances, the break-even acceptance, and the checked speedup."""
    base = cal.plain()
    c = cal.costs
    lines = [f"{cal.preset} on {c.device[:40]} ({cal.engine})"[:80],
             f"plain: {base.step_ms:.2f} ms a token ({base.tok_s:.1f} tok/s)",
             "speedup over plain when each drafted token is accepted with probability p:",
             f"{'K':>3} {'step ms':>8} {'x plain':>7} "
             + " ".join(f"{'p=' + format(p, 'g'):>6}" for p in _GRID)
             + f" {'break-even':>10} {'measured':>9}"]
    for k in sorted(c.step_ratio):
        cells = " ".join(f"{c.speedup(k, p):6.2f}" for p in _GRID)
        even = c.break_even(k)
        checked = cal.checked(k)
        measured = (f"{checked.tok_s / base.tok_s:5.2f}@{checked.synth_p:g}"
                    if checked else "")
        lines.append(f"{k:>3} {c.step_ratio[k] * base.step_ms:8.2f} {c.step_ratio[k]:6.2f}x "
                     f"{cells} {'p>' + format(even, '.2f') if even else 'never':>10} "
                     f"{measured:>9}")
    lines.append("break-even: the acceptance above which drafting that length beats plain "
                 "decoding")
    if c.idle_ratio is not None:
        # A launch choosing off starts without the draft whatever this reads (tuning._launch);
        # it decides only for a session whose requests turn drafting off (DraftCap).
        lines.append(f"draft loaded, off: {c.idle_ratio * base.step_ms:.2f} ms a token "
                     f"({1 / c.idle_ratio:.2f}x plain)")
        lines.append("  off in a session: " + ("the draft stays loaded" if c.idle_is_free()
                     else "relaunched without the draft once it cost a relaunch"))
    if not c.synthetic:
        lines.append("(real draft timed: no synthetic acceptance in this engine)")
    return lines


def plot_calibration(cal: Calibration, path: Path) -> Path:
    """A PNG of predicted decode speed (× plain) against acceptance length (tokens per step)
    for each draft length, break-even marked; returns ``path``. Needs matplotlib (the plot
    extra); raises :class:`CalibrationError` without it or when the file cannot be written."""
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise CalibrationError("--plot needs matplotlib, which comes with the plot extra: "
                               "pip install 'dflash-agent[plot]'") from exc
    fig = Figure(figsize=(7.0, 4.5), dpi=100, layout="constrained")
    ax = fig.add_subplot()
    c = cal.costs
    for k in sorted(c.step_ratio):
        ps = [i / 200 for i in range(201)]
        ax.plot([tokens_per_step(p, k) for p in ps], [c.speedup(k, p) for p in ps],
                label=f"K = {k}")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1, label="plain (break-even)")
    ax.set_xlabel("acceptance length (tokens per step)")
    ax.set_ylabel("decode speed (x plain)")
    ax.set_title(f"{cal.preset} on {c.device}: plain {cal.plain().tok_s:.0f} tok/s", fontsize=9)
    ax.legend(fontsize=8)
    return save_png(fig, path, CalibrationError)


def default_result_path(cal: Calibration) -> Path:
    """``<state>/calibrate/<UTC date and time>.json``."""
    when = cal.costs.measured_at or datetime.now(UTC)
    return home().state / "calibrate" / f"{when.strftime('%Y%m%d-%H%M%S')}.json"
