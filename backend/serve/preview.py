"""``agent backend up --print-cmd``: the exact ``llama-server`` command for a preset, without
building an engine, downloading a model, converting a draft or probing a draft: a tuned
profile shows the draft length that the costs and acceptance stored in the home choose. A busy
preferred port is shown as asked, with a note that the launch would take another.

Files not in the cache yet appear as their source (``hf://…``) with a note; a draft in the
format the engine does not load (old ``dflash-draft`` for upstream and BeeLlama ≥0.4, upstream
``dflash`` for BeeLlama ≤0.3) appears as the converted file it will become, and so does a target
whose preset asks for its weights in another type (``requantize``). With no engine
built yet the upstream command is shown, for ``llama-server`` on PATH.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from backend.engine.flavour import Flavour, binary_devices, binary_facts, detect_flavour
from backend.engine.helpfacts import check_argv
from backend.engine.registry import Engine
from backend.models.convert import NEW_ARCH, OLD_ARCH
from backend.models.drafts import DraftError, converted_path, draft_window, gguf_architecture
from backend.models.hfdraft import is_folder_source
from backend.models.presets import Preset
from backend.models.requant import requantized_path
from backend.serve.launch import draft_context_note, preset_workers, profile_for
from backend.serve.preset_status import ModelFile, cached_file, draft_file
from backend.serve.process import port_is_free
from backend.serve.profiles import LaunchPlan, server_argv
from backend.serve.quirks import launch_flags
from backend.serve.tuning import tune, with_ngram_lengths

_PLACEHOLDER = "/dflash-agent-not-downloaded"


@dataclass
class Preview:
    """The command (binary first) and what the user should know about it."""

    argv: list[str]
    notes: list[str] = field(default_factory=list)


def _file(found: ModelFile, index: int, notes: list[str]) -> Path:
    if found.path is not None:
        return found.path
    notes.append(f"{found.source} is not downloaded yet (`agent backend download` or `up` "
                 "fetches it)")
    return Path(f"{_PLACEHOLDER}/{index}")


def preview_command(preset: Preset, engine: Engine | None, host: str, port: int,
                    profile: str | None = None, ctx_size: int | None = None,
                    parallel: int = 1, idle_timeout: int | None = None,
                    rpc: tuple[str, ...] | None = None) -> Preview:
    """What ``up`` would run for ``preset`` on ``engine`` (None: not built yet), over the RPC
    workers ``rpc`` (None: the preset's own).

    Raises ``PresetError`` when the profile needs a draft the preset lacks, ``ValueError``
    from the translation (e.g. DFlash with ``parallel > 1``).
    """
    notes: list[str] = []
    chosen = profile_for(preset, profile)
    flavour: Flavour = "upstream"
    if engine is None:
        notes.append("no engine is built yet (`agent backend build`): showing the upstream "
                     "llama.cpp command")
    else:
        flavour = detect_flavour(engine.binary)
    found = [cached_file(preset.model)]
    if chosen.needs_draft and preset.draft:
        found.append(draft_file(preset))  # type: ignore[arg-type]
    paths = [_file(f, i, notes) for i, f in enumerate(found)]
    if preset.requantize and not str(paths[0]).startswith(_PLACEHOLDER):
        rewrite = requantized_path(paths[0], preset.requantize)
        if not rewrite.is_file():
            notes.append(f"the target's weights are rewritten once to "
                         f"{preset.requantize.upper()} (the preset's `requantize`) at the path "
                         "shown, by `up` or `agent backend download`")
        paths[0] = rewrite
    draft = paths[1] if len(paths) > 1 else None
    if draft is not None and not str(draft).startswith(_PLACEHOLDER):
        wanted = OLD_ARCH if flavour == "bee-old" else NEW_ARCH
        try:
            arch = gguf_architecture(draft)
            if arch in (OLD_ARCH, NEW_ARCH) and arch != wanted:
                notes.append(f"the draft is in the '{arch}' format, which {flavour} builds do "
                             f"not load: `up` converts it once to '{wanted}' at the path shown")
                draft = converted_path(draft, wanted)
        except DraftError as exc:
            notes.append(str(exc))
    if draft is not None:
        # Known before anything is fetched, and a reason to pick a smaller --ctx-size now.
        # The converted file's own window when it is there; before a download, a drafter
        # the product will convert gets draft_train_ctx as its window (hfdraft.windowed_config).
        window = draft_window(draft) if Path(draft).is_file() else (
            preset.draft_train_ctx if is_folder_source(preset.draft) else None)
        long_ctx = draft_context_note(preset, ctx_size or preset.ctx_size, window)
        if long_ctx:
            notes.append(long_ctx)
    plan = LaunchPlan(binary=engine.binary if engine else Path("llama-server"), model=paths[0],
                      profile=chosen.name, ctx_size=ctx_size or preset.ctx_size, draft=draft,
                      parallel=parallel, idle_timeout=idle_timeout, options=preset.server,
                      extra_flags=tuple(preset.extra_flags),
                      rpc=rpc if rpc is not None else preset_workers(preset))
    if engine is not None:
        plan = with_ngram_lengths(plan)
        plan, choice = tune(plan, allow_probe=False, note=notes.append)
        if choice is not None:
            notes.append(f"speculation: {choice.line()}")
    argv = server_argv(plan, host, port, flavour)
    if not port_is_free(host, port):
        # `up` does not fail on a busy port (server.pick_port): the command shown is not the
        # one that would run, so say where it would differ.
        notes.append(f"port {port} is in use: `up` would pick a free port instead (or reuse "
                     "a server already running this configuration)")
    if engine is not None and flavour == "bee-old":
        added, why = launch_flags(plan, flavour, binary_devices(engine.binary))
        at = len(argv) - len(plan.extra_flags)
        argv[at:at] = added
        if why:
            notes.append(why)
    if engine is not None:
        notes += [f"this build would reject: {p}" for p in check_argv(argv, binary_facts(
            engine.binary))]
    for i, source in enumerate(f.source for f in found):
        argv = [source if a == f"{_PLACEHOLDER}/{i}" else a for a in argv]
    return Preview(argv, notes)
