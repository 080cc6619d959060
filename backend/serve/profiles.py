"""Speculation profiles and their translation into ``llama-server`` arguments.

A profile is data; :func:`server_argv` turns it into the argv of a ``llama-server`` of a given
flavour (upstream b11434, bee-old, bee-new; docs/design/backend-facts.md, "Flags").
Pure functions only: nothing here starts a process.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from backend.engine.flavour import Flavour
from backend.models.presets import ProfileName, ServerOptions


class Profile(BaseModel):
    """What kind of speculative decoding the server runs."""

    model_config = ConfigDict(frozen=True)
    name: ProfileName
    spec_types: tuple[str, ...] = Field((), description="Values for --spec-type, joined by ','.")
    draft_n_max: int | None = Field(None, description="--spec-draft-n-max (tokens per draft).")
    needs_draft: bool = Field(False, description="True when a draft model must be given.")
    tuned: bool = Field(False, description="True when the launch chooses the draft length "
                        "(0 = off) from measured costs and acceptance (backend.serve.tuning); "
                        "draft_n_max is then the longest it may choose.")
    ngram_lengths: bool = Field(False, description="True when the launch may set ngram-mod's "
                                "lengths (a preset's own, or the product's for a GPU: "
                                "backend.serve.tuning.with_ngram_lengths); False keeps "
                                "llama.cpp's.")


PROFILES: dict[str, Profile] = {
    "baseline": Profile(name="baseline"),
    # Prompt-lookup speculation: no draft model; strong when output repeats the context.
    # Its lengths are chosen per device at the launch (tuning.with_ngram_lengths).
    "ngram": Profile(name="ngram", spec_types=("ngram-mod",), ngram_lengths=True),
    # llama.cpp's own lengths, always: the reference the chosen ones are measured against.
    "ngram-fixed": Profile(name="ngram-fixed", spec_types=("ngram-mod",)),
    # b11434 defaults --spec-draft-n-max to 3; DFlash drafts 16-token blocks (block - 1 = 15).
    # The length is tuned per launch: 15 only pays for a very good draft on a large target
    # (docs/design/speculation-costs.md), and a draft that does not pay is not run at all.
    "dflash": Profile(name="dflash", spec_types=("draft-dflash",), draft_n_max=15,
                      needs_draft=True, tuned=True),
    # The untuned launch (always 15 drafted tokens; on BeeLlama <= 0.3 the engine's own 16
    # under its adaptive controller): the reference the tuning is measured by.
    "dflash-fixed": Profile(name="dflash-fixed", spec_types=("draft-dflash",), draft_n_max=15,
                            needs_draft=True),
    # Both: upstream tries its n-gram drafters first and the draft model when they find no
    # match (common/speculative.cpp, common_speculative_init's order of preference), so text
    # copied from the context costs no draft pass.
    "dflash+ngram": Profile(name="dflash+ngram", spec_types=("draft-dflash", "ngram-mod"),
                            draft_n_max=15, needs_draft=True, tuned=True, ngram_lengths=True),
}


class LaunchPlan(BaseModel):
    """Everything that decides a server's behaviour; its hash keys server reuse."""

    model_config = ConfigDict(frozen=True)
    binary: Path
    model: Path
    profile: ProfileName
    ctx_size: int = Field(ge=256, description="Context size in tokens.")
    draft: Path | None = None
    parallel: int = Field(1, ge=1, description="Server slots (-np).")
    idle_timeout: int | None = Field(None, ge=1, description="Seconds idle before the server "
                                     "sleeps and frees the model's memory "
                                     "(--sleep-idle-seconds); it wakes on the next request.")
    options: ServerOptions = Field(default_factory=ServerOptions)
    extra_flags: tuple[str, ...] = ()
    rpc: tuple[str, ...] = Field((), description="RPC workers (host:port) the server spreads "
                                 "the model's layers over (--rpc); empty: this machine only.")
    draft_n_max: int | None = Field(None, ge=0, le=15, description="Draft length chosen for "
                                    "this launch (backend.serve.tuning); 0 = drafting off (no "
                                    "draft model loaded); None = the profile's own.")


def get_profile(name: str) -> Profile:
    """The profile called ``name``; raises ``ValueError`` naming the known profiles."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile '{name}' (known: {', '.join(PROFILES)})")
    return PROFILES[name]


def _options(o: ServerOptions, flavour: Flavour) -> list[str]:
    argv: list[str] = []
    pairs = [("-ngl", o.gpu_layers), ("-fa", o.flash_attn), ("-b", o.batch_size),
             ("-ub", o.ubatch_size), ("-ctk", o.cache_type_k), ("-ctv", o.cache_type_v),
             ("-ctxcp", o.ctx_checkpoints), ("--cache-ram", o.cache_ram),
             ("--reasoning", o.reasoning)]
    for flag, value in pairs:
        if value is not None:
            argv += [flag, str(value)]
    argv += ["--swa-full"] * o.swa_full + ["--kv-unified"] * o.kv_unified
    argv += ["--no-host"] * o.no_host
    if o.lock_memory:
        # docs/design/backend-facts.md, Flags: bee-old has --no-mmap/--mlock; later builds only
        # --load-mode.
        argv += ["--no-mmap", "--mlock"] if flavour == "bee-old" else ["--load-mode", "mlock"]
    if flavour == "upstream":
        # Policy: the fit check (backend.serve.fit) sizes the plan; the server must honour it or
        # fail loudly rather than shrink layers or context behind the user's back.
        argv += ["--fit", "on" if o.fit else "off"]
    return argv


def _is_dflash(profile: Profile) -> bool:
    return profile.spec_types == ("draft-dflash",)


def _speculation(plan: LaunchPlan, profile: Profile, flavour: Flavour) -> list[str]:
    argv: list[str] = []
    if profile.name == "dflash+ngram" and flavour == "bee-old":
        # v0.3.1 runs DFlash on a path of its own, keyed on the last --spec-type; whether it
        # also consults ngram-mod there was never run: refuse rather than guess.
        raise ValueError("the dflash+ngram profile is not proven on BeeLlama <= 0.3 (bee-old): "
                         "use the dflash profile there")
    n_max = plan.draft_n_max if plan.draft_n_max is not None else profile.draft_n_max
    types = profile.spec_types
    lengths = plan.options.ngram if profile.ngram_lengths else None
    ngram = lengths.argv() if lengths and "ngram-mod" in types else []
    if profile.needs_draft and n_max == 0:
        # Drafting off: no draft model, so no draft pass (a confidence cut would still run it
        # every step); what the profile speculates without a draft stays.
        types = tuple(t for t in types if t != "draft-dflash")
        return ["--spec-type", ",".join(types), *ngram] if types else []
    if profile.needs_draft:
        if plan.draft is None:
            raise ValueError(f"profile '{profile.name}' needs a draft model; the preset has none")
        argv += ["--spec-draft-model", str(plan.draft)]
        if plan.options.draft_gpu_layers is not None:
            argv += ["--spec-draft-ngl", plan.options.draft_gpu_layers]
        # A quantized draft KV collapses acceptance (docs/design/backend-facts.md, Known DFlash
        # problems): keep it f16.
        argv += ["--spec-draft-type-k", "f16", "--spec-draft-type-v", "f16"]
    if _is_dflash(profile) and flavour == "bee-old":
        types = ("dflash",)
    if types:
        argv += ["--spec-type", ",".join(types)]
    if _is_dflash(profile) and flavour == "bee-old":
        if plan.options.dflash_cross_ctx is not None:
            argv += ["--spec-dflash-cross-ctx", str(plan.options.dflash_cross_ctx)]
        if plan.draft_n_max is not None:
            # A length the product chose (tuning, calibration) is drafted as chosen: v0.3.1's
            # adaptive draft-max controller would resize it (and ran far slower than plain
            # decoding: docs/performance.md, "BeeLlama v0.3.1"). Without a chosen length the
            # engine's own defaults stay: 16 tokens under that controller (dflash-fixed's
            # reference).
            argv += ["--spec-draft-n-max", str(plan.draft_n_max), "--no-spec-dm-adaptive"]
    elif n_max is not None:
        argv += ["--spec-draft-n-max", str(n_max)]
    return argv + ngram


def server_argv(plan: LaunchPlan, host: str, port: int,
                flavour: Flavour = "upstream") -> list[str]:
    """The full argv (binary first) for ``plan`` on a ``flavour`` build at ``host:port``.

    One translation covers the three flavours; where they differ (docs/design/backend-facts.md,
    "Flags"): DFlash is ``--spec-type dflash`` (+ ``--spec-dflash-cross-ctx``; a length the product
    chose as ``--spec-draft-n-max`` with ``--no-spec-dm-adaptive``, else v0.3.1's own 16 under
    its adaptive controller) on bee-old and ``draft-dflash`` with ``--spec-draft-n-max`` (the
    plan's tuned length, else 15) elsewhere,
    and no draft at all when the plan's length is 0; locked weights are
    ``--no-mmap --mlock`` on bee-old and ``--load-mode mlock`` elsewhere; ``--fit`` is set
    explicitly on upstream. Check the result with :func:`backend.engine.helpfacts.check_argv`.

    Raises ``ValueError`` when the profile needs a draft model and the plan has none, when
    DFlash is asked with more than one slot (it crashed with ``-np > 1`` on bee-old CUDA), or
    for ``dflash+ngram`` on bee-old.
    """
    profile = get_profile(plan.profile)
    if profile.needs_draft and plan.parallel > 1 and plan.draft_n_max != 0:
        raise ValueError("DFlash runs with one slot (-np 1); drop --parallel or choose the "
                         "ngram or baseline profile")
    argv = [str(plan.binary), "-m", str(plan.model), "--host", host, "--port", str(port),
            "-c", str(plan.ctx_size), "-np", str(plan.parallel), "--metrics", "--slots",
            "--jinja"]
    if plan.rpc:
        argv += ["--rpc", ",".join(plan.rpc)]
    argv += _speculation(plan, profile, flavour)
    argv += _options(plan.options, flavour)
    if plan.idle_timeout is not None:
        argv += ["--sleep-idle-seconds", str(plan.idle_timeout)]
    argv += list(plan.extra_flags)
    return argv
