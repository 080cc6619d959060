"""Task benchmark: coding agents on small repository-edit tasks, judged by hidden checks.

A task is a folder (``<suite>/<id>/``) with the starting files (``repo/``), the instruction
(``task.md``, or ``instruction`` in ``task.toml``), the check command (``check`` in
``task.toml``), hidden check files (``check/``) copied in only after the agent has stopped,
and a reference solution (``solution/``). Each task runs in a fresh git repository through
the agent's normal command line; the check's exit code decides pass or fail. One JSON line
per task goes to the results file; ``report`` turns it into a markdown table and a chart.

    python -m benchmarks.tasks run --agent dflash-agent --tasks repo-edit --out r.jsonl
    python -m benchmarks.tasks report r.jsonl --plot r.png

README.md beside this file says what is recorded and how.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent
"""The folder holding the suites (each a folder of task folders)."""
