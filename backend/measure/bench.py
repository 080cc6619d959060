"""``agent backend bench``: decode speed of speculation profiles against baseline, measured in
one run on the same binary and model.

One server per profile is started side by side (never the user's managed server: each carries
its own ``--alias``, so its plan hash differs), then every request is sent to every profile in
turn, prompt-major, so that thermal or load drift hits all profiles alike. Requests follow the
seed's shape — a single user message, ``max_tokens`` and ``temperature`` — plus the preset's
top-k/top-p/min-p (which the seed set on the server command line) and ``cache_prompt: false``,
so every request prefills its whole prompt and prefill speed stays comparable.

Every request carries a sampling ``seed`` of its prompt and repeat, the same for every profile: at
temperature 0.7 two profiles that decode alike then sample the same answer, so a ratio compares
speeds, not the lengths of different sampled answers (without one, two plain servers read each
other several percent apart: benchmarks/RESULTS.md, section "v4 on one H200 from its first launch,
every set and temperature, and the agent's own turns"). Each sample keeps its answer's SHA-256, and
:func:`different_answers` names the requests whose answer is not the reference profile's: a draft
can change even a greedy answer (batched verification rounds differently), and there the ratio
compares two texts.

What a run produces (samples, statistics, the machine) is :mod:`backend.measure.results`.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import httpx2

from backend.engine.flavour import binary_facts, detect_flavour
from backend.engine.registry import Engine
from backend.errors import EXIT_USAGE
from backend.home import home
from backend.measure.prompts import BenchPrompt
from backend.measure.results import (
    REFERENCE_PROFILE,
    BenchError,
    BenchResult,
    ModelFile,
    Sample,
    ServerInfo,
    machine_info,
    request_seed,
    sample_from_response,
    summarize,
    tokens_per_second,
)
from backend.models.presets import Preset
from backend.serve import pipeline
from backend.serve.fit import FitError
from backend.serve.pipeline import LaunchRequest
from backend.serve.process import DEFAULT_HOST, get_json, pick_port, stop
from backend.serve.profiles import LaunchPlan, get_profile
from backend.serve.records import ServerState, keep_current_marker
from backend.serve.server import interrupt_on_termination
from backend.serve.speculation.costs import synth_rates
from backend.serve.speculation.draft_cap import DraftCap
from backend.serve.speculation.store import TuningError, effective_n_max, record_turns
from backend.serve.tuning import tune


class BenchUsage(BenchError):
    """The command line asks for something impossible (unknown or duplicate profile, a
    profile needing a draft the preset lacks, bad temperatures)."""

    plain = True
    exit_code = EXIT_USAGE


def parse_profiles(spec: str | None, preset: Preset) -> list[str]:
    """The profiles to compare: ``spec`` (comma-separated) or baseline plus the preset's own.

    Raises :class:`BenchUsage` for an unknown or repeated profile, or one needing a draft
    model the preset does not have.
    """
    if spec is None:
        names = list(dict.fromkeys([REFERENCE_PROFILE, preset.profile]))
    else:
        names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise BenchUsage("--profiles is empty; give e.g. baseline,ngram")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise BenchUsage(f"--profiles lists {', '.join(repeated)} more than once")
    for name in names:
        try:
            profile = get_profile(name)
        except ValueError as exc:
            raise BenchUsage(str(exc)) from exc
        if profile.needs_draft and not preset.draft:
            raise BenchUsage(f"the {name} profile needs a draft model and preset "
                             f"'{preset.name}' has none; choose a preset with a draft "
                             f"(--preset) or other --profiles")
    return names


def parse_temperatures(spec: str) -> list[float]:
    """``"0.7,0"`` → ``[0.7, 0.0]``; raises :class:`BenchUsage` for anything else."""
    try:
        values = [float(t) for t in spec.split(",") if t.strip()]
    except ValueError as exc:
        raise BenchUsage(f"--temperatures '{spec}': expected numbers like 0.7,0") from exc
    if not values or any(not 0.0 <= t <= 2.0 for t in values):
        raise BenchUsage(f"--temperatures '{spec}': give one or more values in 0..2")
    return list(dict.fromkeys(values))


def different_answers(result: BenchResult) -> list[str]:
    """One line per profile and prompt whose answers are not the reference profile's at the
    same temperature and repeat (their ratio compares different texts), with the tokens
    each side decoded; empty when every answer matched or no answer was kept."""
    reference = {(s.prompt, s.temperature, s.repeat): s for s in result.samples
                 if s.profile == result.reference_profile}
    differ: dict[tuple[str, str, float], list[tuple[Sample, Sample]]] = {}
    for s in result.samples:
        ref = reference.get((s.prompt, s.temperature, s.repeat))
        if (s.profile == result.reference_profile or ref is None or s.answer_sha256 is None
                or ref.answer_sha256 is None or s.answer_sha256 == ref.answer_sha256):
            continue
        differ.setdefault((s.profile, s.prompt, s.temperature), []).append((s, ref))
    lines = []
    for (profile, prompt, temp), pairs in differ.items():
        tokens = ", ".join(f"{s.completion_tokens} vs {ref.completion_tokens}"
                           for s, ref in pairs)
        lines.append(f"{profile} answered {prompt} at t={temp:g} unlike "
                     f"{result.reference_profile} in {len(pairs)} repeat(s) ({tokens} tokens): "
                     "its ratio there compares different texts")
    return lines


def _bench_plan(preset: Preset, engine: Engine, profile: str, ctx_size: int | None,
                synth_accept: float | None, start_timeout: float,
                note: Callable[[str], None] | None, temperatures: list[float]
                ) -> tuple[LaunchPlan, str | None, dict[float, int] | None]:
    """The plan a profile is measured with (tuned as a launch would be, or for the synthetic
    acceptance), the tuning's line (None for untuned profiles) and, for a server that takes
    its draft length per request, the length requests at each temperature carry (else None).

    A tuned profile is tuned once per temperature: its acceptance record is read per kind of
    sampling (:func:`backend.serve.speculation.costs.same_sampling`). A server that takes the length
    per request serves each temperature its own choice (0 where drafting is off there); another
    server is launched with the first temperature's."""
    request = LaunchRequest(preset, profile=profile, ctx_size=ctx_size, timeout=start_timeout)
    base = pipeline.resolve(request, engine=engine, note=note).plan
    tuned = {t: tune(base, synth_p=synth_accept, timeout=start_timeout, note=note,
                     temperature=t) for t in temperatures}
    plan = tuned[temperatures[0]][0]
    per_request = [t for t, (_, c) in tuned.items() if c is not None and c.per_request]
    caps = None
    if per_request:
        plan = tuned[per_request[0]][0]
        caps = {t: c.n_max if c is not None and c.per_request else 0
                for t, (_, c) in tuned.items()}
        unloaded = [t for t, (p, _) in tuned.items() if p.draft_n_max == 0]
        if unloaded and note:
            # What the bench measures there is not what that temperature's launch runs: the
            # loaded draft slows requests at 0 (docs/performance.md, "What the tuning's
            # thresholds rest on").
            note(f"{profile}: requests at t={', '.join(f'{t:g}' for t in unloaded)} run on a "
                 "server with the draft loaded, where their own launch would start without it; "
                 "bench one temperature at a time to measure each launch")
    lines = {t: c.line() for t, (_, c) in tuned.items() if c is not None}
    line = None
    if lines:
        line = next(iter(lines.values())) if len(set(lines.values())) == 1 else "; ".join(
            f"t={t:g}: {text}" for t, text in lines.items())
    flags: tuple[str, ...] = ("--alias", f"dflash-agent-bench-{profile}")
    k = effective_n_max(plan)
    if synth_accept is not None and k:
        if not binary_facts(plan.binary).has("--spec-synth-rates"):
            raise BenchUsage(f"--synth-accept needs an engine with --spec-synth-rates "
                             f"(upstream b11434 or later); {engine.key} has none")
        flags += ("--spec-synth-rates", synth_rates(synth_accept, k))
    return plan.model_copy(update={"extra_flags": (*plan.extra_flags, *flags)}), line, caps


def _post(client: httpx2.Client, state: ServerState, profile: str, prompt: BenchPrompt,
          body: dict) -> dict:
    url = state.base_url + "/v1/chat/completions"
    # A build's known bug worked around per request (backend.serve.quirks); the body's own keys win.
    body = {**state.request_extra, **body}
    try:
        resp = client.post(url, json=body)
    except httpx2.HTTPError as exc:
        raise BenchError(f"the {profile} server at {state.base_url} failed on prompt "
                         f"'{prompt.name}': {exc} (server log: {state.log})") from exc
    try:
        data = resp.json()
    except ValueError as exc:
        raise BenchError(f"the {profile} server answered prompt '{prompt.name}' with HTTP "
                         f"{resp.status_code} and no JSON (server log: {state.log})") from exc
    if resp.status_code != 200:
        error = data.get("error", {}) if isinstance(data, dict) else {}
        message = error.get("message", resp.text[:200]) if isinstance(error, dict) else error
        hint = (" (raise --ctx-size or lower --max-tokens)"
                if isinstance(error, dict) and error.get("type") == "exceed_context_size_error"
                else "")
        raise BenchError(f"the {profile} server refused prompt '{prompt.name}' with HTTP "
                         f"{resp.status_code}: {message}{hint}")
    return data


def _server_info(profile: str, state: ServerState, speculation: str | None) -> ServerInfo:
    try:
        props = get_json(state.base_url, "/props")
    except (httpx2.HTTPError, ValueError):
        props = {}
    settings = props.get("default_generation_settings") or {}
    return ServerInfo(profile=profile, argv=state.argv, build_info=props.get("build_info"),
                      model_path=props.get("model_path"), n_ctx=settings.get("n_ctx"),
                      speculation=speculation)


def _model_file(path: Path) -> ModelFile:
    return ModelFile(path=path, size_bytes=path.stat().st_size)


WARM_UP_TOKENS = 16
"""Tokens each warm-up request decodes: a few speculative steps, so the verification batch of
the length the first request drafts has run once before anything is timed (on a fresh GPU server
the first such request decodes far slower: docs/performance.md, "What the tuning's thresholds rest
on")."""


def _start(profile: str, plan: LaunchPlan, preset: Preset, client: httpx2.Client, force: bool,
           start_timeout: float, note: Callable[[str], None] | None,
           lengths: Sequence[int] = ()) -> ServerState:
    """Fit check, start, and warm-up requests (weights paged in, buffers allocated), one per
    draft length in ``lengths`` (``speculative.n_max``, for a server that takes it per
    request), else one at the server's own. Warm-ups are neither timed nor observed."""
    request = LaunchRequest(preset, force=force, timeout=start_timeout)
    pipeline.fit(plan, request, note)
    if note:
        note(f"starting the {profile} server")
    state, _ = pipeline.start(plan, replace(request, port=pick_port(DEFAULT_HOST, 0)), note)
    try:
        warm_up = BenchPrompt(name="warm-up", text="Count from one to twenty.")
        for n_max in lengths or [None]:
            body: dict = {"messages": [{"role": "user", "content": warm_up.text}],
                          "max_tokens": WARM_UP_TOKENS, "temperature": 0.0}
            if n_max is not None:
                body["speculative.n_max"] = n_max
            _post(client, state, profile, warm_up, body)
    except BaseException:
        stop(state)
        raise
    return state


def run_bench(preset: Preset, engine: Engine, profiles: list[str], prompts: list[BenchPrompt],
              *, prompt_set: str, temperatures: list[float], max_tokens: int = 1200,
              repeats: int = 1, ctx_size: int | None = None, start_timeout: float = 600.0,
              request_timeout: float = 3600.0, force: bool = False,
              one_at_a_time: bool = False, synth_accept: float | None = None,
              note: Callable[[str], None] | None = None) -> BenchResult:
    """Measure every prompt at every temperature ``repeats`` times on each profile.

    Side by side (default): one server per profile, all up at once, requests interleaved
    (profiles innermost, the first profile rotating). When the servers do not fit together
    (the fit check refuses a later one) or ``one_at_a_time`` is set: one server at a time,
    ``repeats`` rounds whose profile order alternates, so slow drift does not favour one
    profile (a 31B preset on a 24 GB card cannot hold two copies of the model).

    Tuned profiles are tuned as a launch would tune them (a probe when due); with
    ``synth_accept`` every drafting server accepts each drafted token with that probability
    (``--spec-synth-rates``) and tuned profiles choose their length for it. Without it, the
    drafts' acceptance is recorded for the next tuned launch.

    ``profiles`` should come from :func:`parse_profiles`; the reference for speedups is
    ``baseline`` when listed, else the first profile. ``force`` turns a fit refusal into a
    note. Raises :class:`BenchError` (a server refused or answered badly), ``FitError``,
    ``ModelError``, ``PresetError`` or ``ServerError``.
    """
    say = note or (lambda _msg: None)
    reference = REFERENCE_PROFILE if REFERENCE_PROFILE in profiles else profiles[0]
    started = datetime.now(UTC)
    with keep_current_marker():
        tuned = {p: _bench_plan(preset, engine, p, ctx_size, synth_accept, start_timeout, note,
                                temperatures)
                 for p in profiles}
    plans = {p: plan for p, (plan, _, _) in tuned.items()}
    # A per-request server's lengths: fixed for a synthetic acceptance; otherwise chosen per
    # request by a DraftCap per temperature, as in a session (it explores, then re-chooses).
    caps = {p: k for p, (_, _, k) in tuned.items() if k is not None}
    controls = {} if synth_accept is not None else {
        p: {t: DraftCap(plans[p], note, t, source="bench") for t in temperatures} for p in caps}
    for profile, (_, line, _) in tuned.items():
        if line:
            say(f"{profile}: {line}")
    request_extra: dict[str, float | int | bool] = {"cache_prompt": False}
    for key in ("top_k", "top_p", "min_p"):
        value = getattr(preset.sampling, key)
        if value is not None:
            request_extra[key] = value
    samples: list[Sample] = []
    servers: dict[str, ServerInfo] = {}
    total = len(prompts) * len(temperatures) * repeats * len(profiles)
    timeout = httpx2.Timeout(connect=10.0, read=request_timeout, write=60.0, pool=10.0)

    def warm_lengths(profile: str) -> list[int]:
        # The lengths the first requests will carry, so their steps are not the first run.
        if profile in controls:
            return sorted({c.next_n_max() for c in controls[profile].values()} - {0})
        return sorted(set(caps.get(profile, {}).values()) - {0})

    def measure(client: httpx2.Client, states: dict[str, ServerState], profile: str,
                prompt: BenchPrompt, temp: float, repeat: int) -> None:
        body = {"messages": [{"role": "user", "content": prompt.text}],
                "max_tokens": max_tokens, "temperature": temp,
                "seed": request_seed(prompt.name, repeat), **request_extra}
        if profile in controls:
            body["speculative.n_max"] = controls[profile][temp].next_n_max()
        elif profile in caps:
            body["speculative.n_max"] = caps[profile][temp]
        data = _post(client, states[profile], profile, prompt, body)
        if profile in controls:
            controls[profile][temp].observe(body["speculative.n_max"], data.get("timings"))
        sample = sample_from_response(data, index=len(samples), profile=profile,
                                      prompt=prompt.name, temperature=temp, repeat=repeat,
                                      seed=body["seed"])
        samples.append(sample)
        rate = tokens_per_second(sample.completion_tokens, sample.decode_ms) or 0.0
        say(f"[{len(samples)}/{total}] {prompt.name} t={temp:g} {profile}: "
            f"{sample.completion_tokens} tokens, {rate:.1f} tok/s, "
            f"draft {sample.draft_accepted}/{sample.draft_n}")

    with interrupt_on_termination(), keep_current_marker(), \
            httpx2.Client(timeout=timeout) as client:
        states: dict[str, ServerState] = {}
        try:
            if not one_at_a_time:
                for profile, plan in plans.items():
                    try:
                        states[profile] = _start(profile, plan, preset, client, force,
                                                 start_timeout, note, warm_lengths(profile))
                    except FitError:
                        if not states:
                            raise
                        say(f"the {profile} server does not fit beside the others: "
                            "measuring one server at a time instead")
                        one_at_a_time = True
                        break
            if not one_at_a_time:
                servers = {p: _server_info(p, s, tuned[p][1]) for p, s in states.items()}
                group = 0
                for prompt in prompts:
                    for temp in temperatures:
                        for repeat in range(repeats):
                            # Rotating who goes first keeps any order effect off one profile.
                            shift = group % len(profiles)
                            group += 1
                            for profile in profiles[shift:] + profiles[:shift]:
                                measure(client, states, profile, prompt, temp, repeat)
        finally:
            for state in states.values():
                stop(state)
        if one_at_a_time:
            for repeat in range(repeats):
                order = profiles if repeat % 2 == 0 else profiles[::-1]
                for profile in order:
                    states = {profile: _start(profile, plans[profile], preset, client, force,
                                              start_timeout, note, warm_lengths(profile))}
                    try:
                        servers.setdefault(profile, _server_info(profile, states[profile],
                                                                 tuned[profile][1]))
                        for prompt in prompts:
                            for temp in temperatures:
                                measure(client, states, profile, prompt, temp, repeat)
                    finally:
                        stop(states[profile])
    if synth_accept is None:
        # The draft's acceptance on these prompts informs the next tuned launch.
        for profile, plan in plans.items():
            for temp in temperatures:
                try:
                    if profile in controls:
                        controls[profile][temp].save()
                        continue
                    record_turns(plan, [{"draft_n": s.draft_n,
                                         "draft_n_accepted": s.draft_accepted,
                                         "predicted_n": s.completion_tokens,
                                         "predicted_ms": s.decode_ms}
                                        for s in samples
                                        if s.profile == profile and s.temperature == temp],
                                 source="bench", temperature=temp)
                except TuningError as exc:  # the measurements stand without it
                    say(f"could not record the draft's acceptance: {exc}")
                    break
    per_prompt, overall = summarize(samples, profiles, [p.name for p in prompts],
                                    temperatures, reference)
    first = next(iter(plans.values()))
    draft = next((p.draft for p in plans.values() if p.draft is not None), None)
    try:
        flavour: str = detect_flavour(engine.binary)
    except (OSError, subprocess.SubprocessError):
        flavour = "unknown"
    ordered = [servers[p] for p in profiles if p in servers]
    return BenchResult(
        date=started, machine=machine_info(), engine=engine.key,
        engine_version=engine.version, binary=engine.binary, flavour=flavour,
        build_info=ordered[0].build_info, preset=preset.name, model=_model_file(first.model),
        draft=_model_file(draft) if draft else None, prompt_set=prompt_set, prompts=prompts,
        profiles=profiles, reference_profile=reference, max_tokens=max_tokens,
        temperatures=temperatures, repeats=repeats, ctx_size=first.ctx_size,
        request_extra=request_extra, servers=ordered, samples=samples,
        per_prompt=per_prompt, overall=overall, one_at_a_time=one_at_a_time,
        synth_accept=synth_accept)


def write_result(result: BenchResult, path: Path) -> Path:
    """Write ``result`` as indented JSON to ``path`` (parents created); returns ``path``.

    Raises :class:`BenchError` when the file cannot be written.
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(result.model_dump_json(indent=2), "utf-8")
    except OSError as exc:
        raise BenchError(f"cannot write the results to {path}: {exc}") from exc
    return path


def default_result_path(result: BenchResult) -> Path:
    """``<state>/bench/<UTC date and time>.json``."""
    return home().state / "bench" / f"{result.date.strftime('%Y%m%d-%H%M%S')}.json"
