"""OpenCode (``opencode-ai``): ``opencode run --format json`` (its documented non-interactive
mode, one JSON event a line) with a config file that adds the server as an
``@ai-sdk/openai-compatible`` provider, every permission allowed and the build agent's step
limit set; its data, cache and config folders go to the scratch folder, outside the repository
and the user's own."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.tasks.adapters.base import AgentRun, Limits, json_lines
from benchmarks.tasks.adapters.peer import Peer
from benchmarks.tasks.tasks import Task

PROVIDER = "llama"
"""The provider id the config gives the server (the model is ``llama/<id>``)."""
QUIET_ENV = {"OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_MODELS_FETCH": "1",
             "OPENCODE_DISABLE_SHARE": "1", "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
             "OPENCODE_DISABLE_CLAUDE_CODE": "1", "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1"}
"""No update check, model catalogue download, sharing, language-server download, nor the
user's other agents' prompts and skills: the same run on every machine, offline."""


def opencode_config(api: str, model: str, max_steps: int) -> dict[str, Any]:
    """The ``opencode.json`` of a run: the server at ``api`` (``<url>/v1``) as a provider
    with the one model, that model as the default, every tool allowed without asking, the
    build agent stopped after ``max_steps`` steps."""
    return {"$schema": "https://opencode.ai/config.json", "autoupdate": False,
            "share": "disabled", "model": f"{PROVIDER}/{model}",
            "provider": {PROVIDER: {"npm": "@ai-sdk/openai-compatible",
                                    "name": "llama-server",
                                    "options": {"baseURL": api, "apiKey": "x"},
                                    "models": {model: {"name": model, "tool_call": True}}}},
            "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
            "agent": {"build": {"steps": max_steps}}}


class OpenCode(Peer):
    """``opencode run --format json --auto --model llama/<model> --dir <repo> TASK`` with
    ``OPENCODE_CONFIG`` naming the generated config. Its edits are its own tools (``edit``,
    ``write``, ``patch``) through the server's native tool calls: the only format it has."""

    name = "opencode"
    FORMATS = ("native",)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._scratch: Path | None = None

    def flags(self) -> list[str]:
        return ["run", "--format", "json", "--auto"]

    def command(self, task: Task, repo: Path, limits: Limits, scratch: Path) -> list[str]:
        api, model, binary = self.endpoint()
        scratch.mkdir(parents=True, exist_ok=True)
        self._scratch = scratch
        config = opencode_config(api, model, limits.max_steps)
        (scratch / "opencode.json").write_text(json.dumps(config, indent=2))
        return [str(binary), *self.flags(), "--model", f"{PROVIDER}/{model}",
                "--dir", str(repo), task.instruction]

    def env(self) -> dict[str, str]:
        env = {**super().env(), **QUIET_ENV}
        if self._scratch is not None:
            env["OPENCODE_CONFIG"] = str(self._scratch / "opencode.json")
            for kind in ("DATA", "CONFIG", "CACHE", "STATE"):
                env[f"XDG_{kind}_HOME"] = str(self._scratch / kind.lower())
        return env

    def parse(self, run: AgentRun) -> dict[str, Any]:
        return self.fields(run, **read_events(run.stdout))


def read_events(stdout: str) -> dict[str, Any]:
    """Counts of ``opencode run --format json``'s events: a ``step_finish`` per model call
    (its ``tokens``: ``input``, ``output``, ``cache.read``), a ``tool_use`` per tool call
    (``part.tool``; ``state.status`` ``error`` a failed one), an ``error`` event's message."""
    steps = prefilled = cached = decoded = failed = 0
    calls: Counter = Counter()
    error = None
    for ev in json_lines(stdout):
        part = ev.get("part") if isinstance(ev.get("part"), dict) else {}
        kind = ev.get("type")
        if kind == "step_finish":
            steps += 1
            tokens = part.get("tokens") or {}
            prefilled += int(tokens.get("input") or 0)
            decoded += int(tokens.get("output") or 0) + int(tokens.get("reasoning") or 0)
            cached += int((tokens.get("cache") or {}).get("read") or 0)
        elif kind == "tool_use":
            calls[str(part.get("tool"))] += 1
            failed += (part.get("state") or {}).get("status") == "error"
        elif kind == "error":
            detail = ev.get("error")
            if isinstance(detail, dict):
                data = detail.get("data")
                message = data.get("message") if isinstance(data, dict) else None
                detail = message or detail.get("name")
            error = str(detail)[:300]
    out: dict[str, Any] = {"steps": steps, "tool_calls": dict(calls), "tool_errors": failed,
                           "prefilled": prefilled, "cached": cached, "decoded": decoded}
    if error:
        out["error"] = error
    return out
