"""``agent new-project``: recipe and plan, a new directory with ``git init``, its isolated
environment, the agent in full-auto inside it, the project's own test runner run by the
product, and an honest commit.

- ``flow.py`` — :func:`new_project` end to end: folder checks, recipe, plan, then the work.
- ``target.py`` — the target folder's checks, before the model is asked anything.
- ``names.py`` — the folder's slug and the simple recipe's module name.
- ``planner.py`` — the full recipe's plan attempts with the model.
- ``work.py`` — the agent's run, the fix rounds (the product's test run sent back), the commit.
- ``commit.py`` — ``git init`` and its excludes, the files, the commit and its message.
- ``result.py`` — :class:`ProjectResult` and the totals over its model turns.
- ``recipe.py`` — ``simple`` or ``full`` (by the model's size or the setting), the prompts.
- ``plan.py`` — the plan's schema, parsing with feedback for the model, the toolchain check.
- ``toolchains.py`` — the ecosystems (tools on PATH, markers, ignores, skills).
- ``environment.py`` — the project's ``.venv`` and the environment its commands see.
- ``runners.py`` — the project's test runner, found from its files, and its verdict.
"""

from agent.newproject.flow import ToolchainMissing, new_project
from agent.newproject.names import slugify
from agent.newproject.result import ProjectResult
from agent.newproject.runners import TestReport, run_project_tests

__all__ = ["ProjectResult", "TestReport", "ToolchainMissing", "new_project",
           "run_project_tests", "slugify"]
