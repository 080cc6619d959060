"""dflash-agent itself: ``agent run TASK --repo DIR --approval full-auto --json`` with the
task's limits, its numbers read from the event stream."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from benchmarks.tasks.adapters.base import Adapter, AgentRun, Limits, last_line
from benchmarks.tasks.adapters.stream import read_stream, stream_fields
from benchmarks.tasks.tasks import Task

EXIT_REASONS = {2: "usage_error", 3: "error", 4: "internal_error", 130: "interrupted"}
"""``agent``'s exit codes (README) as a stop reason, for a run with no final event."""


def agent_command() -> list[str]:
    """dflash-agent's own entry point: the ``agent`` beside this interpreter, else
    ``python -m agent``."""
    beside = Path(sys.executable).parent / "agent"
    return [str(beside)] if beside.is_file() else [sys.executable, "-m", "agent"]


class DflashAgent(Adapter):
    """``agent run TASK --repo DIR --approval full-auto --json --max-steps N --max-time S``."""

    name = "dflash-agent"

    def __init__(self, tool_protocol: str | None = None, preset: str | None = None,
                 base_url: str | None = None, profile: str | None = None,
                 command: list[str] | None = None):
        self.tool_protocol, self.preset, self.base_url = tool_protocol, preset, base_url
        self.profile = profile
        self.base = command or agent_command()

    @property
    def label(self) -> str:
        return f"{self.name}/{self.tool_protocol or 'auto'}"

    def config(self) -> dict[str, Any]:
        return {"tool_protocol": self.tool_protocol or "auto", "preset": self.preset,
                "profile": self.profile, "server": "given" if self.base_url else "managed"}

    def info(self) -> dict[str, Any]:
        return {"command": self.base, "flags": ["--approval", "full-auto", "--json"]}

    def command(self, task: Task, repo: Path, limits: Limits, scratch: Path) -> list[str]:
        argv = [*self.base, "run", task.instruction, "--repo", str(repo), "--approval",
                "full-auto", "--json", "--max-steps", str(limits.max_steps),
                "--max-time", f"{limits.timeout_s:g}"]
        for flag, value in (("--tool-protocol", self.tool_protocol), ("--preset", self.preset),
                            ("--profile", self.profile), ("--base-url", self.base_url)):
            if value:
                argv += [flag, value]
        return argv

    def parse(self, run: AgentRun) -> dict[str, Any]:
        s = read_stream(run.stdout.splitlines())
        fields = stream_fields(s)
        if run.exit_code is None:
            fields["stop_reason"] = "killed_at_wall_limit"
        else:
            fields["stop_reason"] = s.stop_reason or EXIT_REASONS.get(run.exit_code,
                                                                      f"exit_{run.exit_code}")
        error = s.error or (last_line(run.stderr) if run.exit_code not in (0, 1) else None)
        fields["error"] = error
        return fields
