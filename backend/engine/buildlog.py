"""A build's steps run with their output appended to the build log, ninja's and make's progress
reported as they go."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from backend.engine.registry import BuildError

Progress = Callable[[str, int | None, int | None], None]
"""Progress callback: (step, units done or None, units total or None). A build's first call
is ``("log <path>", None, None)``: where its full log is written (:data:`LOG_STEP`)."""

LOG_STEP = "log"
"""The first progress step of a build; the build log's path follows it after a space."""


def log_tail(log: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of the build log (empty when it cannot be read)."""
    try:
        return "\n".join(log.read_text("utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


_NINJA = re.compile(r"^\[(\d+)/(\d+)\]")
_MAKE = re.compile(r"^\[\s*(\d+)%\]")


def run_logged(step: str, cmd: list[str], log: Path, cwd: Path,
               progress: Progress | None = None, env: dict[str, str] | None = None) -> None:
    """Run ``cmd`` appending output to ``log``; report ninja/make progress; raise on failure."""
    with log.open("a", encoding="utf-8") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        try:
            proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    text=True, errors="replace", env=env)
        except OSError as exc:
            raise BuildError(step, f"could not start {cmd[0]}: {exc}", log) from exc
        with proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                if progress:
                    if m := _NINJA.match(line):
                        progress(step, int(m.group(1)), int(m.group(2)))
                    elif m := _MAKE.match(line):
                        progress(step, int(m.group(1)), 100)
            code = proc.wait()
    if code != 0:
        raise BuildError(step, f"{cmd[0]} exited with status {code}", log, log_tail(log))
