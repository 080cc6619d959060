"""``agent new-project``: recipe and plan, a new directory with ``git init``, its isolated
environment, the agent in full-auto inside it, the project's own test runner run by the
product, and an honest commit.

- ``flow.py`` — :func:`new_project` end to end, the commit message.
- ``recipe.py`` — ``simple`` or ``full`` (by the model's size or the setting), the prompts.
- ``plan.py`` — the plan's schema, parsing with feedback for the model, the toolchain check.
- ``toolchains.py`` — the ecosystems (tools on PATH, markers, ignores, skills).
- ``environment.py`` — the project's ``.venv`` and the environment its commands see.
- ``runners.py`` — the project's test runner, found from its files, and its verdict.
"""

from agent.newproject.flow import ProjectResult, ToolchainMissing, new_project, slugify
from agent.newproject.runners import TestReport, run_project_tests

__all__ = ["ProjectResult", "TestReport", "ToolchainMissing", "new_project",
           "run_project_tests", "slugify"]
