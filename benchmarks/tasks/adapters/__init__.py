"""Agent adapters: one small class per agent builds its command line and reads its output
into the task record. ``dflash-agent`` runs ``agent run ... --json`` and reads the event
stream; each peer (``aider``, ``mini-swe-agent``, ``opencode``, ``qwen-code``, ``codex``) runs
its documented non-interactive mode against the same OpenAI-compatible server, installed at a
pinned version into its own folder (``install.py``).

Modules: ``base`` (limits, running the process, the ``Adapter`` class), ``install`` (the
pinned peers and their install), ``server`` (the managed llama-server, the served model),
``stream`` (dflash-agent's event stream), ``peer`` (what the peers share), then one module per
agent."""

from benchmarks.tasks.adapters.aider import Aider
from benchmarks.tasks.adapters.base import Adapter
from benchmarks.tasks.adapters.codex import Codex
from benchmarks.tasks.adapters.dflash import DflashAgent
from benchmarks.tasks.adapters.mini_swe_agent import MiniSweAgent
from benchmarks.tasks.adapters.opencode import OpenCode
from benchmarks.tasks.adapters.qwen_code import QwenCode

ADAPTERS: dict[str, type[Adapter]] = {
    cls.name: cls for cls in (DflashAgent, Aider, MiniSweAgent, OpenCode, QwenCode, Codex)}
"""The agents ``run --agent NAME`` knows, by name."""
