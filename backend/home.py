"""Where dflash-agent keeps all of its state.

One home holds engines, models, server state and logs, sessions and config. By default the
directories are platformdirs' user dirs for ``dflash-agent``; ``DFLASH_AGENT_HOME`` relocates all
of them under one folder (tests point it at a temporary directory).

Everything in it is private to the user: the folders are 0700 and the logs that hold tool output
(session logs, server and crash logs) are created 0600 (:func:`private_open`), since a session
log holds every command's output, secrets included.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

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
        """Create every directory (idempotent), private to the user (0700, also when it
        existed with a wider mode), and return self."""
        for path in (self.config, self.cache, self.state, self.data, self.engines, self.models,
                     self.servers, self.crashes, self.sessions):
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            if path.stat().st_mode & 0o077:
                path.chmod(0o700)
        return self


def _private_opener(path: str, flags: int) -> int:
    fd = os.open(path, flags, 0o600)
    os.fchmod(fd, 0o600)  # a file made before this rule, or under another umask
    return fd


def private_open(path: Path | str, mode: str = "a", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` for a file only the user may read (0600 from its creation on).

    Same arguments and errors as :func:`open`."""
    opener: Callable[[str, int], int] = _private_opener
    return open(path, mode, opener=opener, **kwargs)


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
