"""The doctor's config-file checks: ``<config>/presets.toml``, ``<config>/config.toml`` and
``<config>/mcp.json`` loaded exactly as the commands load them, so a file that would make
``agent run`` fail fails here first, naming the file, the key and what to do.

They live in the agent package because the settings are the agent's; ``backend.doctor`` takes
them as callables (``run_checks(extra=CONFIG_CHECKS)``).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import resources

from agent.config import ConfigError, load_settings
from backend.doctor import Check
from backend.home import home
from backend.models.presets import PresetError, load_presets
from tools.mcp import config as mcp_config


def check_presets() -> Check:
    """``<config>/presets.toml`` through :func:`backend.models.presets.load_presets`."""
    path = home().config / "presets.toml"
    try:
        presets = load_presets()
    except PresetError as exc:
        return Check("presets", "fail", str(exc),
                     f"fix that table in {path} (its keys are those of the packaged "
                     f"{resources.files('backend.models') / 'presets.toml'}) or move the file "
                     "aside to use the packaged presets")
    where = f"with {path}" if path.is_file() else f"no {path}"
    return Check("presets", "ok", f"{len(presets)} presets ({where})")


def check_settings() -> Check:
    """``<config>/config.toml`` (and ``DFLASH_AGENT_*`` variables) through
    :func:`agent.config.load_settings`, which also refuses a preset no presets file defines."""
    path = home().config / "config.toml"
    try:
        settings = load_settings()
    except ConfigError as exc:
        return Check("config", "fail", str(exc),
                     f"fix or delete that key in {path} (or unset the variable); the settings "
                     f"and their defaults are in {resources.files('agent') / 'defaults.toml'}")
    where = f"with {path}" if path.is_file() else f"no {path}"
    return Check("config", "ok", f"settings load ({where}; preset {settings.preset})")


def check_mcp() -> Check:
    """The user's ``<config>/mcp.json`` through :func:`tools.mcp.config.load` (project files
    belong to a repository, not to this machine)."""
    path = mcp_config.user_file()
    found = mcp_config.load(None)
    if found.errors:
        return Check("mcp config", "fail", "; ".join(found.errors),
                     f"fix those entries in {path} (format: {{\"mcpServers\": {{NAME: "
                     "{command, args, env} or {type: \"http\", url}}}}) or remove them with "
                     "an editor; `agent mcp list` shows the servers once it loads")
    if not path.is_file():
        return Check("mcp config", "ok", f"no {path}")
    return Check("mcp config", "ok", f"{len(found.servers)} server(s) in {path}")


CONFIG_CHECKS: tuple[Callable[[], Check], ...] = (check_presets, check_settings, check_mcp)
"""In the order the doctor prints them."""
