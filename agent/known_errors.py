"""Which failures are the user's to act on, for every front end (the CLI, the MCP server's
task worker): one line, with a crash log only where a traceback could help.

Kept apart from :mod:`agent.errors` (which everything imports) because it names the error
classes of the whole product, and apart from :mod:`agent.cli.main` because the MCP worker,
a layer below the CLI, needs the same answer: it reported an unknown preset or an unreachable
server as a crash, with a crash log, where the CLI gives one plain line."""

from __future__ import annotations

from agent.client import ContextOverflow, ServerUnavailable
from agent.config import ConfigError
from agent.context import ContextTooSmall
from agent.errors import UserError
from backend.cache import CacheError
from backend.engine.registry import BuildError
from backend.measure.bench import BenchUsage
from backend.measure.calibrate import CalibrationError
from backend.measure.prompts import PromptsError
from backend.measure.results import BenchError
from backend.models.convert import ConvertError
from backend.models.drafts import DraftError
from backend.models.ggufinfo import GgufError
from backend.models.presets import PresetError
from backend.models.sources import ModelError
from backend.serve.fit import FitError
from backend.serve.records import ServerError
from backend.serve.rpc import RpcError
from backend.serve.speculation.store import TuningError
from backend.serve.worker import WorkerError

KNOWN_ERRORS = (UserError, BuildError, ModelError, PresetError, ServerError, ConfigError,
                ServerUnavailable, ContextOverflow, ContextTooSmall, ConvertError,
                CacheError, BenchError, PromptsError, DraftError, FitError, GgufError,
                CalibrationError, TuningError, RpcError, WorkerError)
"""Failures with a stated cause (exit 3): said in one line, never an internal error."""

PLAIN_ERRORS = (UserError, ConfigError, PresetError, BenchUsage, PromptsError, FitError,
                CacheError, ContextTooSmall, ConvertError, CalibrationError, RpcError,
                WorkerError)
"""The user's own mistake or choice, fully said in one line: no crash log (a traceback
would not help); the other known errors (build, server, model files) keep one."""


def is_plain(exc: BaseException) -> bool:
    """Whether ``exc`` is said in its one line alone (no crash log)."""
    return isinstance(exc, PLAIN_ERRORS) or bool(getattr(exc, "plain", False))
