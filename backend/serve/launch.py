"""The launch's parts that the pipeline (:mod:`backend.serve.pipeline`) and a running session
use: the engine (built on first use), the profile a preset runs, the plan (models fetched on
first use), whether a running server is kept, and a session's relaunch without its draft."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from backend.engine.build import build_llama_cpp, default_engine
from backend.engine.buildlog import Progress
from backend.engine.flavour import detect_flavour
from backend.engine.registry import Engine, unusable_engines
from backend.models.drafts import draft_for, draft_window, swa_quant_warning
from backend.models.hfdraft import resolve_draft
from backend.models.presets import Preset, PresetError
from backend.models.requant import requantized
from backend.models.sources import resolve_model
from backend.serve.leases import hold, holders
from backend.serve.profiles import LaunchPlan, Profile, get_profile
from backend.serve.records import ServerError, ServerState
from backend.serve.server import retire, up
from backend.serve.tuning import loaded_off_speed, stale_note, with_ngram_lengths


def keep_serving(serving: ServerState, wanted: LaunchPlan, temperature: float | None,
                 note: Callable[[str], None] | None = None) -> bool:
    """Whether to reuse ``serving`` for ``wanted`` (a plan it serves: :func:`backend.serve.
    server.compatible`), saying through ``note`` when its draft length is not what is measured
    now (:func:`backend.serve.tuning.stale_note`). False after stopping it, for a launch of
    its own: when what is measured now turns drafting off while that server keeps a draft
    loaded that costs (:func:`backend.serve.tuning.loaded_off_speed`) and no other live
    process holds a lease on it (:mod:`backend.serve.leases`): a draft loaded and off slows
    every turn (docs/performance.md, "What the tuning's thresholds rest on")."""
    speed = loaded_off_speed(serving.plan, wanted, temperature)
    others = [pid for pid in holders(serving) if pid != os.getpid()] if speed else []
    if speed is None or others:
        stale = stale_note(serving.plan, wanted, temperature)
        if stale and note is not None:
            note(stale + (f"; it stays up while another session (pid "
                          f"{', '.join(map(str, others))}) uses it" if others else ""))
        return True
    if note is not None:
        note(f"what is measured now turns drafting off, and the running server at "
             f"{serving.base_url} keeps its draft loaded, which decodes at {speed:.2f}x of a "
             "server without it: starting one without the draft")
    retire(serving)
    return False


def unload_draft(serving: ServerState, note: Callable[[str], None], why: str,
                 timeout: float = 600.0) -> ServerState | None:
    """For the session using ``serving`` (a per-request server whose requests turned drafting
    off while its loaded draft costs:
    :meth:`backend.serve.speculation.draft_cap.DraftCap.unload_due`): the same server started again
    without the draft, at the same address where the port is free again, with this session's lease
    on it. None, after saying why through ``note``, while another live session holds a lease on it:
    it stays as it is. ``why`` is said before the relaunch, only when there is one.

    Where the server without the draft fails to start, the one with it is started again in its
    place (the session goes on as before); raises ``ServerError`` when that fails too."""
    others = [pid for pid in holders(serving) if pid != os.getpid()]
    if others:
        note(f"the server at {serving.base_url} keeps its draft loaded: another session (pid "
             f"{', '.join(map(str, others))}) uses it")
        return None
    note(why)
    plain = serving.plan.model_copy(update={"draft_n_max": 0})
    line = ("drafting off: this session's requests turned it off, and the loaded draft "
            "decoded slower than a server without it")
    retire(serving)
    try:
        state, _ = up(plain, port=serving.port, host=serving.host, preset=serving.preset,
                      timeout=timeout, progress=note, speculation=line)
    except ServerError as exc:
        note(f"the server without the draft did not start ({str(exc).splitlines()[0]}); "
             "starting the one with it again")
        state, _ = up(serving.plan, port=serving.port, host=serving.host,
                      preset=serving.preset, timeout=timeout, progress=note,
                      speculation=serving.speculation)
    try:
        hold(state)
    except OSError as exc:
        note(f"could not record this session's use of the server ({exc}): another command "
             "may relaunch it")
    return state


def ensure_engine(sdist: Path | None = None, progress: Progress | None = None,
                  note: Callable[[str], None] | None = None, rpc: bool = False) -> Engine:
    """The installed engine (with ``rpc``: one with ``rpc-server``, for workers), building the
    embedded default (which has RPC) when none runs on this CPU; each installed engine skipped
    for this CPU is said through ``note`` first."""
    engine = default_engine(rpc=rpc)
    if engine is not None:
        return engine
    if note:
        for _, why in unusable_engines():
            note(f"not using {why}: building one for this CPU")
        if rpc and (other := default_engine()) is not None:
            note(f"engine {other.key} was built without RPC: building one with rpc-server")
    return build_llama_cpp(sdist=sdist, progress=progress)


def profile_for(preset: Preset, profile: str | None = None) -> Profile:
    """``profile`` (default: the preset's own); raises ``PresetError`` when it needs a draft
    model and the preset has none."""
    chosen = get_profile(profile or preset.profile)
    if chosen.needs_draft and not preset.draft:
        raise PresetError(f"the {chosen.name} profile needs a draft model and preset "
                          f"'{preset.name}' has none; set `draft` for it in presets.toml or "
                          "choose another --profile")
    return chosen


def draft_context_note(preset: Preset, ctx_size: int, window: int | None = None) -> str | None:
    """A line when ``ctx_size`` runs past the context the preset's draft was trained on
    (``draft_train_ctx``); None otherwise.

    ``window``: the draft attention window its GGUF carries (``dflash.attention.sliding_window``,
    :func:`backend.models.drafts.draft_window`). b11434 has no server flag for a draft window
    (z-lab's cards recommend SGLang's ``--speculative-dflash-draft-window-size`` for long agentic
    sessions); its DFlash loader reads that GGUF key instead and its graph then attends over the
    last ``window`` positions of the target's context only (``src/models/dflash.cpp``). A
    safetensors drafter converted by the product gets ``draft_train_ctx`` as that window
    (:func:`backend.models.hfdraft.windowed_config`), and the line says it is in force; a GGUF
    draft made elsewhere without one gets a note that nothing bounds what the draft sees."""
    if preset.draft_train_ctx is None or ctx_size <= preset.draft_train_ctx:
        return None
    if window:
        return (f"the draft was trained on {preset.draft_train_ctx} tokens of context and this "
                f"launch has {ctx_size}: its GGUF carries a draft window of {window} tokens "
                "(dflash.attention.sliding_window), so it attends to the last "
                f"{window} positions of the context only, as z-lab recommends for long sessions")
    return (f"the draft was trained on {preset.draft_train_ctx} tokens of context and this "
            f"launch has {ctx_size}: past that its acceptance may fall, and this draft GGUF has "
            "no draft attention window to bound it (this engine sets one only in the GGUF: a "
            "safetensors drafter converted by the product gets one); watch the per-turn "
            "acceptance, or use a smaller --ctx-size")


def plan_for(preset: Preset, engine: Engine, profile: str | None = None,
             ctx_size: int | None = None, note: Callable[[str], None] | None = None,
             parallel: int = 1, idle_timeout: int | None = None,
             sdist: Path | None = None, rpc: tuple[str, ...] | None = None) -> LaunchPlan:
    """Resolve the preset's models (fetching them) into a launch plan.

    An old-format DFlash draft is converted for builds that need the upstream format
    (:func:`backend.models.drafts.draft_for`), a safetensors drafter converted first
    (:func:`backend.models.hfdraft.resolve_draft`); n-gram lookup gets the lengths for the device
    (:func:`backend.serve.tuning.with_ngram_lengths`). ``rpc``: the workers to spread the
    layers over (None: the preset's own ``rpc``). Raises ``PresetError`` (also for a preset's
    broken worker list, or workers with an engine built without RPC), ``ModelError`` or
    ``DraftError``.
    """
    chosen = profile_for(preset, profile)
    workers = rpc if rpc is not None else preset_workers(preset)
    if workers and engine.rpc_server is None:
        raise PresetError(f"RPC workers need an engine built with RPC, and {engine.key} was "
                          "built without it; run `agent backend build --rpc`")
    model = requantized(resolve_model(preset.model, note), preset.requantize, note)
    draft = None
    if chosen.needs_draft and preset.draft:
        # A safetensors drafter is converted once (``sdist``: the converter's, offline).
        # draft_train_ctx becomes a draft window when the product converts the drafter.
        draft = resolve_draft(preset.draft, model, preset.target_tokenizer, preset.draft_type,
                              sdist, note, window=preset.draft_train_ctx)
    if draft is not None:
        draft = draft_for(draft, detect_flavour(engine.binary), note)
        warning = swa_quant_warning(draft)
        if warning and note:
            note(warning)
        # Read from the file that runs: a draft made elsewhere may or may not carry a window.
        long_ctx = draft_context_note(preset, ctx_size or preset.ctx_size, draft_window(draft))
        if long_ctx and note:
            note(long_ctx)
    return with_ngram_lengths(LaunchPlan(
        binary=engine.binary, model=model, profile=chosen.name,
        ctx_size=ctx_size or preset.ctx_size, draft=draft, parallel=parallel,
        idle_timeout=idle_timeout, options=preset.server, extra_flags=tuple(preset.extra_flags),
        rpc=workers))


def preset_workers(preset: Preset) -> tuple[str, ...]:
    """The preset's RPC workers (checked when the preset was read:
    :func:`backend.models.presets.parse_workers`)."""
    return tuple(preset.rpc)

