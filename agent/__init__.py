"""The agent: CLI, loop, sessions, config, project creation."""

import os

# GitPython refuses to import without a git executable; commands that never touch git (doctor,
# presets, bench, mcp serve) must still run, and git-using paths then fail with a clear error.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
