"""mini-swe-agent (``mini-swe-agent``, command ``mini``): its local-environment runner in yolo
mode (no confirmations), exiting when the model submits, with the task's step and time limits,
talking to the server through litellm's ``openai/<model>`` with ``api_base``. Its trajectory
file (``-o``) is what the record is read from."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.tasks.adapters.base import AgentRun, BenchError, Limits
from benchmarks.tasks.adapters.peer import Peer
from benchmarks.tasks.tasks import Task

CONFIGS = {"text": ("mini_textbased.yaml", "litellm_textbased"), "tool": ("mini.yaml", "litellm")}
"""Edit format -> (built-in config, model class): ``text`` is one shell command in a fenced
block per reply (mini-swe-agent's original format, no tool-calling needed: a small model's
best), ``tool`` the ``bash`` tool through native tool calls."""
TRAJECTORY = "trajectory.json"


class MiniSweAgent(Peer):
    """``mini -c <config> -c model.model_class=... -c model.model_kwargs.api_base=<url>/v1
    -c agent.step_limit=N -c agent.wall_time_limit_seconds=S -c environment.cwd=<repo> -m
    openai/<model> -t TASK --yolo --exit-immediately --cost-limit 0 -o <scratch>``."""

    name = "mini-swe-agent"
    FORMATS = tuple(CONFIGS)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._scratch: Path | None = None

    def read_version(self) -> str:
        # ``mini`` has no --version: its venv's metadata has it
        python = self.binary.parent / "python" if self.binary else Path("python")
        proc = self._call([str(python), "-c", "import importlib.metadata as m; "
                           "print(m.version('mini-swe-agent'))"])
        if proc.returncode != 0:
            raise BenchError(f"cannot read mini-swe-agent's version with {python}")
        return f"mini-swe-agent {proc.stdout.strip()}"

    def flags(self) -> list[str]:
        config, model_class = CONFIGS[self.edit_format]
        return ["-c", config, "-c", f"model.model_class={model_class}",
                "-c", "model.cost_tracking=ignore_errors", "--yolo", "--exit-immediately",
                "--cost-limit", "0"]

    def command(self, task: Task, repo: Path, limits: Limits, scratch: Path) -> list[str]:
        api, model, binary = self.endpoint()
        scratch.mkdir(parents=True, exist_ok=True)
        self._scratch = scratch
        return [str(binary), *self.flags(),
                "-c", f"model.model_kwargs.api_base={api}",
                "-c", "model.model_kwargs.api_key=x",
                "-c", f"agent.step_limit={limits.max_steps}",
                "-c", f"agent.wall_time_limit_seconds={int(limits.timeout_s)}",
                "-c", f"environment.cwd={repo}",
                "-m", f"openai/{model}", "-t", task.instruction,
                "-o", str(scratch / TRAJECTORY)]

    def env(self) -> dict[str, str]:
        config = self._scratch / "config" if self._scratch else None
        return {**super().env(), "MSWEA_CONFIGURED": "true", "MSWEA_SILENT_STARTUP": "1",
                "MSWEA_COST_TRACKING": "ignore_errors",
                # litellm would fetch its price list from the network at import
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                **({"MSWEA_GLOBAL_CONFIG_DIR": str(config)} if config else {})}

    def parse(self, run: AgentRun) -> dict[str, Any]:
        trajectory: dict[str, Any] = {}
        if self._scratch is not None:
            try:
                trajectory = json.loads((self._scratch / TRAJECTORY).read_text())
            except (OSError, ValueError):
                trajectory = {}
        fields = read_trajectory(trajectory)
        status = fields.pop("exit_status")
        out = self.fields(run, **fields)
        if status and run.exit_code is not None:
            out["stop_reason"] = status
        return out


def read_trajectory(trajectory: dict[str, Any]) -> dict[str, Any]:
    """Counts of a mini-swe-agent trajectory (``trajectory_format`` 1.1): model calls (every
    message carrying the server's response, a reply refused for its format included),
    commands run, format errors, tokens (llama-server's ``timings`` when the response kept
    them, else its ``usage``), the decode time (``predicted_ms`` summed, only when every
    reply had timings: else no speed) and ``info.exit_status`` (Submitted, LimitsExceeded, ...)."""
    steps = format_errors = prefilled = cached = decoded = failed = 0
    timed_tokens, decode_ms = 0, 0.0
    calls: Counter = Counter()
    messages = trajectory.get("messages") if isinstance(trajectory, dict) else None
    for message in messages if isinstance(messages, list) else []:
        extra = message.get("extra") if isinstance(message, dict) else None
        if not isinstance(extra, dict):
            continue
        if extra.get("interrupt_type") == "FormatError":
            format_errors += 1
        calls["bash"] += len(extra.get("actions") or [])
        failed += extra.get("returncode") not in (None, 0)
        response = extra.get("response")
        if not isinstance(response, dict):
            continue
        steps += 1
        timings = response.get("timings") or {}
        usage = response.get("usage") or {}
        if timings:
            prefilled += int(timings.get("prompt_n") or 0)
            cached += int(timings.get("cache_n") or 0)
            decoded += int(timings.get("predicted_n") or 0)
            timed_tokens += int(timings.get("predicted_n") or 0)
            decode_ms += float(timings.get("predicted_ms") or 0.0)
        else:
            details = usage.get("prompt_tokens_details") or {}
            cached += int(details.get("cached_tokens") or 0)
            prefilled += int(usage.get("prompt_tokens") or 0) - \
                int(details.get("cached_tokens") or 0)
            decoded += int(usage.get("completion_tokens") or 0)
    info = trajectory.get("info") if isinstance(trajectory, dict) else None
    status = str((info or {}).get("exit_status") or "") if isinstance(info, dict) else ""
    return {"steps": steps, "tool_calls": dict(calls), "format_errors": format_errors,
            "tool_errors": failed, "prefilled": prefilled, "cached": cached,
            "decoded": decoded, "decode_ms": decode_ms if timed_tokens == decoded else 0.0,
            "exit_status": status}

