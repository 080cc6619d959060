"""The one launch pipeline: a :class:`LaunchRequest` goes down resolve (the engine, built on
first use, and the plan, its models fetched) → reuse or tune → fit → start, or → print.

Every command that starts a server walks it: ``agent backend up`` and the agent's connect
through :func:`launch`; ``--print-cmd`` through :func:`print_command` (the same request, the
engine found but never built, the command printed instead of started); bench, calibrate and the
benchmark scripts, which start several servers of their own (their own alias, their own port,
never reused), through :func:`resolve`, :func:`fit` and :func:`start` step by step. So a change
to what a launch does is made here once, and ``tests/test_launch_pipeline.py`` checks that each
entry point still comes this way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend.engine.build import default_engine
from backend.engine.buildlog import Progress
from backend.engine.registry import Engine
from backend.models.presets import Preset
from backend.serve.fit import FitReport, check_fit
from backend.serve.launch import ensure_engine, keep_serving, plan_for, preset_workers
from backend.serve.preview import Preview, preview_command
from backend.serve.process import DEFAULT_HOST, DEFAULT_PORT
from backend.serve.profiles import LaunchPlan
from backend.serve.records import ServerState
from backend.serve.server import compatible, plan_differences, running, up
from backend.serve.tuning import tune


@dataclass(frozen=True)
class LaunchRequest:
    """What a command asks to launch; every field but ``preset`` has the plain launch's value.

    ``rpc``: the workers to spread the layers over (None: the preset's own). ``temperature``:
    what requests will sample at (None: the preset's), whose kind of acceptance a tuned length
    is chosen for. ``force``: launch a plan the fit check refuses. ``port``: the preferred port
    (a busy one is replaced by a free one). ``timeout``: seconds a server (or a tuning probe)
    may take to become healthy. ``sdist``: the engine's and the draft converter's offline
    sources. ``session``: the request is an agent session's, which takes a running server of
    its configuration whatever its slot settings, and is told of a server of its preset that it
    does not use; without it (``agent backend up``) the slots asked for are the ones launched.
    """

    preset: Preset
    profile: str | None = None
    ctx_size: int | None = None
    parallel: int = 1
    idle_timeout: int | None = None
    rpc: tuple[str, ...] | None = None
    temperature: float | None = None
    force: bool = False
    port: int = DEFAULT_PORT
    timeout: float = 600.0
    sdist: Path | None = None
    session: bool = False

    def workers(self) -> tuple[str, ...]:
        """The RPC workers this launch spreads the layers over."""
        return self.rpc if self.rpc is not None else preset_workers(self.preset)

    def sampling_temperature(self) -> float | None:
        """The temperature a tuned length is chosen for: the request's, else the preset's."""
        return self.temperature if self.temperature is not None else \
            self.preset.sampling.temperature


@dataclass(frozen=True)
class Resolved:
    """A request resolved: the engine it runs on and the plan (models fetched, not tuned)."""

    request: LaunchRequest
    engine: Engine
    plan: LaunchPlan


@dataclass(frozen=True)
class Choice:
    """The plan to start (tuned, or the one a running server serves) and its speculation line
    (None for an untuned profile)."""

    plan: LaunchPlan
    speculation: str | None


def resolve(request: LaunchRequest, *, engine: Engine | None = None,
            progress: Progress | None = None,
            note: Callable[[str], None] | None = None) -> Resolved:
    """The first step of every launch: the engine (``engine`` when the caller has one, else
    the installed one, built when there is none: :func:`backend.serve.launch.ensure_engine`)
    and the plan (:func:`backend.serve.launch.plan_for`: models fetched, a draft converted).

    Raises ``BuildError``, ``PresetError``, ``ModelError`` or ``DraftError``."""
    workers = request.workers()
    if engine is None:
        engine = ensure_engine(request.sdist, progress, note, rpc=bool(workers))
    plan = plan_for(request.preset, engine, request.profile, request.ctx_size, note,
                    parallel=request.parallel, idle_timeout=request.idle_timeout,
                    sdist=request.sdist, rpc=request.rpc)
    return Resolved(request, engine, plan)


def reuse_or_tune(resolved: Resolved, note: Callable[[str], None] | None = None) -> Choice:
    """A running server that serves the plan, when it should be kept
    (:func:`backend.serve.launch.keep_serving`): its draft length and line, and for a session
    its plan whatever its slots (its draft length changes only at a launch, never under a
    running session). Else the plan tuned (:func:`backend.serve.tuning.tune`: a short
    acceptance probe when one is due; drafting off when it would not pay)."""
    request, plan = resolved.request, resolved.plan
    temperature = request.sampling_temperature()
    serving = compatible(plan)
    if serving is not None and keep_serving(serving, plan, temperature, note):
        kept = serving.plan if request.session else \
            plan.model_copy(update={"draft_n_max": serving.plan.draft_n_max})
        return Choice(kept, serving.speculation)
    plan, choice = tune(plan, timeout=request.timeout, note=note, temperature=temperature)
    if request.session and note is not None:
        for other in running():
            if other.preset == request.preset.name:
                note(f"the {request.preset.name} server at {other.base_url} runs with another "
                     f"{', '.join(plan_differences(plan, other.plan))}; starting one for this "
                     "session's")
    return Choice(plan, choice.line() if choice else None)


def fit(plan: LaunchPlan, request: LaunchRequest,
        note: Callable[[str], None] | None = None) -> FitReport | None:
    """The fit check of ``plan`` (:func:`backend.serve.fit.check_fit`; ``request.force`` turns
    a refusal into a note). Raises ``FitError``, ``GgufError`` or ``RpcError``."""
    return check_fit(plan, force=request.force, note=note)


def start(plan: LaunchPlan, request: LaunchRequest, note: Callable[[str], None] | None = None,
          speculation: str | None = None) -> tuple[ServerState, bool]:
    """Start ``plan`` (or reuse its running server) at ``request.port`` under the request's
    preset (:func:`backend.serve.server.up`); returns (state, reused). Raises
    ``ServerError``."""
    return up(plan, port=request.port, preset=request.preset.name, timeout=request.timeout,
              progress=note, speculation=speculation)


def launch(request: LaunchRequest, *, progress: Progress | None = None,
           note: Callable[[str], None] | None = None) -> tuple[ServerState, bool]:
    """The managed server for ``request``: resolve → reuse or tune → fit → start; returns
    (state, reused). A plan whose server already runs passes the fit check untouched. Raises
    ``BuildError``, ``ModelError``, ``PresetError``, ``FitError``, ``GgufError`` or
    ``ServerError``."""
    chosen = reuse_or_tune(resolve(request, progress=progress, note=note), note)
    fit(chosen.plan, request, note)
    return start(chosen.plan, request, note, chosen.speculation)


def print_command(request: LaunchRequest, host: str = DEFAULT_HOST) -> Preview:
    """The print action: the ``llama-server`` command :func:`launch` would run for
    ``request`` at ``host``, with notes (:func:`backend.serve.preview.preview_command`). The
    engine is the installed one, never built; models are neither fetched nor converted, and a
    tuned length is what the stored measurements choose, without a probe. Raises
    ``PresetError``, ``ValueError`` from the argv's translation."""
    return preview_command(request.preset, default_engine(), host, request.port,
                           request.profile, request.ctx_size, request.parallel,
                           request.idle_timeout, request.workers())
