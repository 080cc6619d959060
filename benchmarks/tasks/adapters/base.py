"""What every agent adapter shares: the limits a task runs under, running the agent's process
(its own process group, killed at the wall-clock limit), the ``Adapter`` base class and the
small helpers that read an agent's output."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.tasks.tasks import Task, end_group

GRACE_S = 60.0
"""Past the task's time limit, how long the runner waits before it kills the agent (the agent
stops itself at ``--max-time``; this is for one that does not)."""


class BenchError(Exception):
    """A peer or server that cannot be set up; one ``error:`` line, exit 3."""


Call = Callable[[list[str]], subprocess.CompletedProcess]
"""Runs a short command (a version, a pip install, ``agent backend status``) to completion;
tests pass a stand-in."""


def run_command(argv: list[str]) -> subprocess.CompletedProcess:
    """Run ``argv`` to completion with its output captured as text and no stdin (an hour at
    most: a pip or npm install on a slow link)."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=3600,
                          stdin=subprocess.DEVNULL)


@dataclass
class Limits:
    """The step and wall-clock limits of one task's run."""

    max_steps: int
    timeout_s: float


@dataclass
class AgentRun:
    """What the agent's process did."""

    argv: list[str]
    exit_code: int | None
    """None: killed at the wall-clock limit."""
    stdout: str
    stderr: str
    seconds: float


def run_agent(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> AgentRun:
    """Run the agent in its own process group with stdout and stderr to unnamed files; at
    ``timeout`` it gets SIGTERM (then SIGKILL)."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            return AgentRun(argv, 127, "", f"cannot start {argv[0]}: {exc}", 0.0)
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        end_group(proc, timed_out=code is None)
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        return AgentRun(argv, code, out.read().decode("utf-8", "replace"),
                        err.read().decode("utf-8", "replace"), seconds)


def last_line(text: str) -> str:
    """The last ``error:`` line of ``text`` (the agent's one-line reason; a crash log's
    ``details:`` line may follow it), else its last line."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    return (errors or lines or [""])[-1][:300]


def tail(text: str, lines: int = 15) -> str:
    """The last ``lines`` lines of ``text``, each cut to 300 characters."""
    return "\n".join(line[:300] for line in text.strip().splitlines()[-lines:])


def json_lines(text: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of ``text``, one a line; other lines (a peer's log lines, a line cut
    when it was killed) are skipped."""
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            yield value


class Adapter:
    """One agent: how to run it on a task and read what it did."""

    name = ""

    @property
    def label(self) -> str:
        """The agent's name in results and tables (with what distinguishes its variants)."""
        return self.name

    def config(self) -> dict[str, Any]:
        """What identifies this agent's runs for ``--resume`` (no ports or paths)."""
        return {}

    def info(self) -> dict[str, Any]:
        """Recorded with every task: version, flags."""
        return {}

    def setup(self) -> None:
        """Once, before the first task (a version, a server)."""

    def command(self, task: Task, repo: Path, limits: Limits, scratch: Path) -> list[str]:
        """The agent's command line for ``task`` in ``repo``; ``scratch`` is a folder outside
        the repository for its history and configuration files."""
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        """The agent's environment (after ``command``: it may name the scratch folder)."""
        return {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}

    def timeout(self, limits: Limits) -> float:
        """When the runner kills the agent (seconds after it started)."""
        return limits.timeout_s + GRACE_S

    def parse(self, run: AgentRun) -> dict[str, Any]:
        """The record's fields from what the agent did (steps, calls, tokens, stop reason)."""
        raise NotImplementedError

    def output_tail(self, run: AgentRun) -> str:
        """The end of what the agent printed besides its results, for the record."""
        return tail(run.stderr)
