"""benchmarks/beellama_toolcall.py on a home without the bee-old engine: a clear error, not a
traceback (it had died in StopIteration)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "beellama_toolcall.py"


def test_a_home_without_the_bee_old_engine_says_what_to_build(tmp_path: Path):
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--home", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "no BeeLlama v0.3.1 (bee-old) engine in this home" in proc.stderr
    assert "agent backend build --engine beellama" in proc.stderr
