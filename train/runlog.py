"""The run log: one JSON line per stage run (settings, data, results), appended to
``train/runs.jsonl`` in the repository unless ``--runs`` names another file, so every number a
draft was chosen by stays with the code that made it."""

from __future__ import annotations

import json
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).resolve().parent / "runs.jsonl"


def _commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10, cwd=DEFAULT.parent)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def append(path: Path | None, stage: str, record: dict[str, Any]) -> Path:
    """Append ``record`` (with the time, stage, commit and machine) to ``path``; returns it."""
    path = Path(path or DEFAULT)
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "stage": stage,
             "commit": _commit(), "machine": platform.node(), **record}
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=False, default=str) + "\n")
    return path
