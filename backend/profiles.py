"""Speculation profiles and their translation into ``llama-server`` arguments.

A profile is data; :func:`server_argv` turns it into the argv of an upstream llama.cpp b11434
``llama-server`` (flags checked against ``common/arg.cpp`` of that tree, see BACKEND-FACTS.md).
Pure functions only: nothing here starts a process.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from backend.presets import ProfileName, ServerOptions


class Profile(BaseModel):
    """What kind of speculative decoding the server runs."""

    model_config = ConfigDict(frozen=True)
    name: ProfileName
    spec_types: tuple[str, ...] = Field((), description="Values for --spec-type, joined by ','.")
    draft_n_max: int | None = Field(None, description="--spec-draft-n-max (tokens per draft).")
    needs_draft: bool = Field(False, description="True when a draft model must be given.")


PROFILES: dict[str, Profile] = {
    "baseline": Profile(name="baseline"),
    # Prompt-lookup speculation: no draft model; strong when output repeats the context.
    "ngram": Profile(name="ngram", spec_types=("ngram-mod",)),
    # b11434 defaults --spec-draft-n-max to 3; DFlash drafts 16-token blocks (block - 1 = 15).
    "dflash": Profile(name="dflash", spec_types=("draft-dflash",), draft_n_max=15,
                      needs_draft=True),
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


def get_profile(name: str) -> Profile:
    """The profile called ``name``; raises ``ValueError`` naming the known profiles."""
    if name not in PROFILES:
        raise ValueError(f"unknown profile '{name}' (known: {', '.join(PROFILES)})")
    return PROFILES[name]


def server_argv(plan: LaunchPlan, host: str, port: int) -> list[str]:
    """The full argv (binary first) for ``plan`` listening on ``host:port``.

    Raises ``ValueError`` when the profile needs a draft model and the plan has none.
    """
    profile = get_profile(plan.profile)
    argv = [str(plan.binary), "-m", str(plan.model), "--host", host, "--port", str(port),
            "-c", str(plan.ctx_size), "-np", str(plan.parallel), "--metrics", "--slots",
            "--jinja"]
    if profile.needs_draft:
        if plan.draft is None:
            raise ValueError(f"profile '{profile.name}' needs a draft model; the preset has none")
        argv += ["--spec-draft-model", str(plan.draft)]
    if profile.spec_types:
        argv += ["--spec-type", ",".join(profile.spec_types)]
    if profile.draft_n_max is not None:
        argv += ["--spec-draft-n-max", str(profile.draft_n_max)]
    if plan.idle_timeout is not None:
        argv += ["--sleep-idle-seconds", str(plan.idle_timeout)]
    argv += list(plan.extra_flags)
    return argv
