"""``agent`` starts without its heavy third-party packages: the model client (openai), the MCP
SDK, gguf with numpy, matplotlib and huggingface_hub are imported by the code that uses them, so
commands that need none of them (``--help``, ``sessions``, ``skills list``…) do not pay for them
(about 1.5 s of every command on a 2-core machine when they were imported at the top)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = {"openai", "mcp", "mcp_types", "gguf", "numpy", "matplotlib", "huggingface_hub"}
LOADED = f"sorted(m for m in sys.modules if m.split('.')[0] in {sorted(HEAVY)})"
MARKER = "heavy modules loaded: "


def test_importing_the_command_line_loads_no_heavy_package() -> None:
    proc = subprocess.run([sys.executable, "-c", f"import agent.cli.main, sys; print({LOADED})"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("args", [["--help"], ["sessions"], ["skills", "list"], ["mcp", "list"],
                                  ["backend", "status"]], ids=" ".join)
def test_commands_that_need_no_heavy_package_run_without_one(args: list[str],
                                                           tmp_path: Path) -> None:
    # The command as `python -m agent` runs it (agent.entry), with the modules listed at exit.
    code = (f"import atexit, sys; atexit.register(lambda: print({MARKER!r} + str({LOADED}))); "
            f"sys.argv = ['agent', *{args!r}]; from agent.entry import main; main()")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1] == MARKER + "[]", proc.stdout
