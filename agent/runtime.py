"""Connecting a session to a model server and choosing its tool-call protocol."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.client import ServerClient, ServerUnavailable
from agent.config import Settings, preset_note
from agent.errors import UsageError
from agent.protocols.choice import ProtocolDecision, decide
from agent.ui import Reporter
from backend.engine.build import default_engine
from backend.engine.flavour import detect_flavour
from backend.models.presets import PresetError, get_preset
from backend.serve.exits import crash_report
from backend.serve.launch import profile_for, unload_draft
from backend.serve.leases import hold
from backend.serve.pipeline import LaunchRequest, launch
from backend.serve.records import ServerError, ServerState
from backend.serve.speculation.control import request_control
from backend.serve.speculation.draft_cap import DraftCap
from backend.serve.speculation.ngram_guard import NgramGuard
from backend.serve.speculation.store import TuningError, effective_n_max, record_turns

_PROBE = "dflash-agent-tool-role-probe"


@dataclass
class Backend:
    """A connected server and the sampling to use with it."""

    client: ServerClient
    preset: str | None
    profile: str | None
    sampling: dict[str, Any]
    state: ServerState | None = None
    draft_cap: DraftCap | NgramGuard | None = None
    """Chooses each request's draft length on a server that takes it per request."""

    @property
    def speculation(self) -> str | None:
        """The managed server's tuned draft length and why; None when untuned or remote."""
        return self.state.speculation if self.state is not None else None

    def draft_length(self) -> str | None:
        """What a step line shows of the draft model: ``draft length K``, ``drafting off`` or
        ``draft model off`` (a tuned profile that turned it off; n-gram lookup may still
        draft), or None when the server has no draft model, sizes drafts itself
        (BeeLlama <= 0.3) or takes the length per request (each step line then says its
        request's own)."""
        plan = self.state.plan if self.state is not None else None
        if plan is None or plan.draft is None or detect_flavour(plan.binary) == "bee-old" \
                or self.draft_cap is not None:
            return None
        k = effective_n_max(plan)
        if k:
            return f"draft length {k}"
        return "draft model off" if "ngram" in plan.profile else "drafting off"


def connect(settings: Settings, reporter: Reporter) -> Backend:
    """The managed server for ``settings.preset`` (built, fetched and started as needed), or
    the server at ``settings.base_url``. Raises the backend's errors."""
    preset = get_preset(settings.preset)
    note = preset_note(settings)
    if note and not settings.base_url:
        reporter.note(note)
    sampling = preset.sampling.model_dump(exclude_none=True)
    if settings.tool_temperature is not None:
        sampling["temperature"] = settings.tool_temperature
    if settings.base_url:
        client = ServerClient(settings.base_url, settings.request_timeout)
        client.check_reachable()
        describe_remote(client, settings.ctx_size, reporter.note)
        return Backend(client, None, None, sampling)
    sdist = Path(settings.engine_sdist) if settings.engine_sdist else None
    try:
        profile_for(preset, settings.profile)  # a profile the preset cannot run: before any build
    except PresetError as exc:
        # Exit 2, as `agent backend up` gives for the same preset and profile.
        raise UsageError(str(exc)) from exc
    if default_engine() is None:
        reporter.note(f"first use: building the engine for the {preset.name} server")
    # Nothing is said before the launch knows whether it starts a server or reuses one.
    request = LaunchRequest(preset, profile=settings.profile, ctx_size=settings.ctx_size,
                            temperature=sampling.get("temperature"), port=settings.port,
                            timeout=settings.server_start_timeout, sdist=sdist, session=True)
    state, reused = launch(request, progress=reporter.build_progress, note=reporter.note)
    try:
        # While this session runs, no other command relaunches its server under it.
        hold(state)
    except OSError as exc:
        reporter.note(f"could not record this session's use of the server ({exc}): another "
                      "command may relaunch it")
    over = f", over RPC workers {','.join(state.plan.rpc)}" if state.plan.rpc else ""
    reporter.note(f"{'reusing' if reused else 'started'} llama-server at {state.base_url} "
                  f"(profile {state.plan.profile}{over})")
    if state.speculation:
        reporter.note(f"speculation: {state.speculation}")
    draft_cap = request_control(state.plan, reporter.note, sampling.get("temperature"))
    client = ServerClient(state.base_url, settings.request_timeout,
                          explain=lambda: crash_report(state),
                          request_extra=state.request_extra, draft_cap=draft_cap)
    backend = Backend(client, preset.name, state.plan.profile, sampling, state, draft_cap)
    if isinstance(draft_cap, DraftCap):
        client.before_request = lambda: unload_when_due(backend, reporter.note,
                                                        settings.server_start_timeout)
    reporter.draft_length = backend.draft_length()
    reporter.request_label = draft_cap.label if isinstance(draft_cap, NgramGuard) else None
    reporter.draft_model = state.plan.draft is not None
    return backend


def unload_when_due(backend: Backend, note: Callable[[str], None], timeout: float,
                    store: bool = True) -> None:
    """Before a request: relaunch the session's server without its draft once its requests
    turned drafting off and the loaded draft has cost what a relaunch does
    (:meth:`backend.serve.speculation.draft_cap.DraftCap.unload_due`), then point the client at the
    new server (:func:`backend.serve.launch.unload_draft`). With ``store`` the draft's observations
    are stored first, as at the end of a task (the agent replay stores none). Raises
    :class:`ServerUnavailable` when no server could be started again."""
    cap, state = backend.draft_cap, backend.state
    if not isinstance(cap, DraftCap) or state is None or not cap.unload_due(state.ready_s):
        return
    try:
        if store:
            cap.save()
    except TuningError as exc:
        note(f"could not record the draft's acceptance: {exc}")
    why = (f"drafting is off for this session, and the loaded draft decodes at "
           f"{cap.off_speed:.2f}x of a server without it: relaunching the server without the "
           "draft")
    try:
        new = unload_draft(state, note, why, timeout)
    except ServerError as exc:
        raise ServerUnavailable(f"the server could not be started again: {exc}") from exc
    if new is None:
        cap.keep_loaded = True
        return
    backend.state = new
    backend.draft_cap = request_control(new.plan, note, backend.sampling.get("temperature"))
    backend.client.rebind(new.base_url, explain=lambda: crash_report(new),
                          request_extra=new.request_extra, draft_cap=backend.draft_cap)
    if isinstance(backend.draft_cap, DraftCap):
        # The server with the draft, started again after the one without it failed: trying
        # again every few requests would fail the same way.
        backend.draft_cap.keep_loaded = True
    else:
        note(f"llama-server at {new.base_url} without the draft (profile {new.plan.profile})")


def describe_remote(client: ServerClient, ctx_size: int | None,
                    note: Any) -> None:
    """Check what a ``--base-url`` server says of itself and ``note`` it in one line.

    llama-server answers ``/props`` (context size, template caps). Another engine (vLLM,
    SGLang) is driven with plain OpenAI requests: its context is ``max_model_len`` from
    ``/v1/models``, else ``ctx_size`` (``--ctx-size``); its prefix caching and speculative
    decoding are configured on its own side; no draft-length controller is used against it.
    Raises :class:`UsageError` when neither the server nor ``ctx_size`` gives the context."""
    n_ctx = client.n_ctx()
    if client.is_llama_server():
        if n_ctx is None and ctx_size is None:
            raise UsageError(f"the server at {client.base_url} does not report its context "
                             "size in /props; pass --ctx-size N (tokens)")
        return
    if n_ctx is None and ctx_size is None:
        raise UsageError(f"the server at {client.base_url} does not report its context size "
                         "(no llama.cpp /props, no max_model_len in /v1/models); pass "
                         "--ctx-size N (tokens)")
    context = (f"context {n_ctx} tokens from /v1/models max_model_len" if n_ctx is not None
               else f"context {ctx_size} tokens from --ctx-size")
    client.tokenize("probe")  # sets estimated_tokens when the server has no /tokenize
    tokens = "; token counts estimated (~3 characters a token: no /tokenize)" \
        if client.estimated_tokens else ""
    note(f"{client.base_url} is not llama-server (no /props): model "
         f"{client.model_id()!r}, {context}; its prefix caching and speculative decoding are "
         f"its own{tokens}")


def record_speculation(backend: Backend, timings: list[Any],
                       warn: Any = None) -> None:
    """Record a task's ``timings`` (drafted and accepted tokens per model call) for the tuned
    launch (:func:`backend.serve.speculation.store.record_turns`): the next launch chooses its draft
    length from them. On a server that takes the length per request, the draft cap's own
    observations are stored instead (each at the length its request carried). A record that
    cannot be written is said through ``warn``, never raised."""
    if backend.state is None:
        return
    try:
        if backend.draft_cap is not None:
            backend.draft_cap.save()
        elif timings:
            record_turns(backend.state.plan, [t.model_dump() for t in timings],
                         temperature=backend.sampling.get("temperature"))
    except TuningError as exc:
        if warn is not None:
            warn(f"could not record the draft's acceptance: {exc}")


def choose_protocol(setting: str, client: ServerClient) -> tuple[str, ProtocolDecision]:
    """(protocol, decision) for the ``tool_protocol`` setting, decided once per session by
    :func:`agent.protocols.choice.decide` (``auto``: ``text``, falling back to ``json``).

    Pass the decision as the Agent's ``auto_switch``: it names the one fallback allowed and is
    logged, with its reason and the facts it saw, before the first request."""
    model = client.props().get("model_path")
    # Without /props (vLLM, SGLang) nothing is known of the template's tool support: the rules
    # then see supports_tools False and the served id as the model, and `auto` takes text
    # (json fallback), whose requests are plain chat messages any engine renders.
    decision = decide(setting, {"supports_tools": client.supports_tools(),
                                "model": Path(model).name if model else None,
                                "llama_server": client.is_llama_server(),
                                **({} if model else {"served_model": client.model_id()})})
    return decision.protocol, decision


def renders_tool_role(client: ServerClient) -> bool:
    """True when the server's chat template renders a ``tool``-role message (checked with
    ``/apply-template``); False when it drops it or the server refuses it.

    The probe is two ``json`` rounds, as that protocol sends them (plain assistant messages,
    each answered by a tool message): a template that checks alternation without counting
    tool messages (Mistral's) accepts one round and refuses the second, two assistant
    messages in a row for it; results then go back as user messages, which alternate."""
    call = {"role": "assistant", "content": '{"tool": "view", "arguments": {}}'}
    messages = [{"role": "user", "content": "hi"},
                call, {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
                call, {"role": "tool", "tool_call_id": "call_2", "content": _PROBE}]
    try:
        return _PROBE in client.apply_template(messages)
    except ServerUnavailable:
        return False
