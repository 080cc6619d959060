"""Where dflash-agent keeps all of its state.

One home holds engines, models, server state and logs, sessions and config. By default the
directories are platformdirs' user dirs for ``dflash-agent``; ``DFLASH_AGENT_HOME`` relocates all
of them under one folder (tests point it at a temporary directory).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "dflash-agent"
HOME_ENV = "DFLASH_AGENT_HOME"


@dataclass(frozen=True)
class Home:
    """The product's directories; nothing here is created until :meth:`ensure` is called."""

    config: Path
    """``config.toml``, ``presets.toml``."""
    cache: Path
    """Built engines (``engines/``) and downloaded models (``models/``)."""
    state: Path
    """Managed server state files, locks and logs (``servers/``), crash logs (``crashes/``)."""
    data: Path
    """Session logs (``sessions/<id>.jsonl`` and ``sessions/index.jsonl``)."""

    @property
    def engines(self) -> Path:
        return self.cache / "engines"

    @property
    def models(self) -> Path:
        return self.cache / "models"

    @property
    def servers(self) -> Path:
        return self.state / "servers"

    @property
    def crashes(self) -> Path:
        return self.state / "crashes"

    @property
    def sessions(self) -> Path:
        return self.data / "sessions"

    def ensure(self) -> Home:
        """Create every directory (idempotent) and return self."""
        for path in (self.config, self.engines, self.models, self.servers, self.crashes,
                     self.sessions):
            path.mkdir(parents=True, exist_ok=True)
        return self


def home() -> Home:
    """The current home: under ``$DFLASH_AGENT_HOME`` when set, else platformdirs' user dirs."""
    root = os.environ.get(HOME_ENV)
    if root:
        base = Path(root).expanduser().resolve()
        return Home(config=base / "config", cache=base / "cache", state=base / "state",
                    data=base / "data")
    return Home(
        config=platformdirs.user_config_path(APP_NAME),
        cache=platformdirs.user_cache_path(APP_NAME),
        state=platformdirs.user_state_path(APP_NAME),
        data=platformdirs.user_data_path(APP_NAME),
    )
