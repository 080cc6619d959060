"""Which recipe a new project follows, and the words the model gets for it.

``full``: the model plans the project (any toolchain this machine has) and builds the layout
its ecosystem expects. ``simple``: today's floor for weak models such as the embedded 135M
default: one Python module, its pytest file, no dependencies. ``auto`` picks by the model's
parameter count as the server reports it (llama-server's ``/v1/models`` ``meta.n_params``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import httpx2

from agent.newproject.plan import Plan, response_format
from agent.newproject.toolchains import ECOSYSTEMS

FULL_RECIPE_MIN_PARAMS = 3_000_000_000
"""Models this size and up plan their projects; smaller ones get the simple recipe (a 135M
model cannot write a plan and a multi-file layout and still finish)."""


@dataclass(frozen=True)
class Recipe:
    """The recipe chosen and why (shown, logged, in the commit)."""

    name: str
    """``simple`` or ``full``."""
    reason: str


def model_params(base_url: str) -> int | None:
    """The served model's parameter count from ``GET /v1/models`` (llama-server puts it in
    ``data[0].meta.n_params``); None when the server does not say."""
    try:
        resp = httpx2.get(base_url.rstrip("/") + "/v1/models", timeout=10.0)
        data = resp.json().get("data") if resp.status_code == 200 else None
        meta = data[0].get("meta") if isinstance(data, list) and data else None
        value = meta.get("n_params") if isinstance(meta, dict) else None
    except (httpx2.HTTPError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) and value > 0 else None


def choose_recipe(setting: str, base_url: str) -> Recipe:
    """The recipe for ``setting`` (``auto``, ``simple`` or ``full``) with the server at
    ``base_url``."""
    if setting in ("simple", "full"):
        return Recipe(setting, "chosen by the new_project_recipe setting (--recipe)")
    params = model_params(base_url)
    if params is None:
        return Recipe("simple", "the server does not report the model's size; pass --recipe "
                      "full for a capable model")
    size = f"{params / 1e9:.2f} B parameters"
    if params >= FULL_RECIPE_MIN_PARAMS:
        return Recipe("full", f"the model has {size}")
    return Recipe("simple", f"the model has {size}, under "
                  f"{FULL_RECIPE_MIN_PARAMS / 1e9:.0f} B; pass --recipe full to override")


SIMPLE_TASK = """Create a new project in the current directory: {description}

Use only Python's standard library (nothing gets installed; argparse for a command line).
Steps:
1. Use the create tool to write the source code in {module}.py.
2. Use the create tool to write pytest tests in tests/test_{module}.py.
3. Run the tests with bash: python -m pytest -q
4. Fix any failure, then finish with a short summary."""

SIMPLE_TASK_WHOLE = """Create a new project in the current directory: {description}

Use only Python's standard library (nothing gets installed; argparse for a command line).
Steps:
1. Write the source code in {module}.py.
2. Write pytest tests in tests/test_{module}.py (import {module}; plain assert statements).
3. Run the tests: python -m pytest -q
4. Fix any failure, then finish with a short summary."""
"""The simple recipe's task under ``whole``, which has no tools to name (files are written as
listings, commands as bash blocks). The tools' words stay for the other protocols: SmolLM2
under ``json``, told only to "write" the files, called ``final_answer`` at once."""


def simple_task(description: str, module: str, protocol: str) -> str:
    """The simple recipe's task for ``protocol``."""
    template = SIMPLE_TASK_WHOLE if protocol == "whole" else SIMPLE_TASK
    return template.format(description=description, module=module)

PLANNER_SYSTEM = """You plan new software projects. Answer with one JSON object and nothing \
else."""

PLAN_REQUEST = """Plan a new project: {description}

Toolchains on this machine: {have}.
Not installed: {lack}.
Use the language the request names, even when its toolchain is not installed (the user is then \
told what to install); when it names none, pick an installed toolchain that suits it.

Answer with one JSON object with exactly these keys:
- "toolchain": one of {names}
- "language": the language and version, e.g. "Python 3.11", "TypeScript", "Rust"
- "summary": one sentence saying what the project is
- "files": every file to write, as paths relative to the project root; the layout a \
developer of that ecosystem expects (Python: {python_layout}), with tests and a README.md
- "install": shell commands that install the dependencies into the project, [] when there \
are none. Python: a virtual environment is made at .venv with pip and pytest in it and is \
first on PATH, so write "python -m pip install NAME"; Node: "npm install NAME" (node_modules). \
Never sudo, pip --user or npm -g.
- "test": the shell command that runs the tests (Python: "python -m pytest -q", Node: \
"npm test", Rust: "cargo test", Go: "go test ./...", Maven: "mvn test", make: "make test")
- "run": how to run the program, or "" for a library"""

FULL_TASK = """Create a new project in the current directory: {description}

The plan (accepted; follow it):
{plan}

Environment: {environment}

Steps:
1. Write every file of the plan with the create tool: {layout}. Put real code in it and tests \
that check real behaviour. The README says what the project is, how to install it and how \
to run it and its tests.
2. Install the dependencies with bash: {install}
3. Run the tests with bash: {test}
4. Fix any failure and run the tests again. Finish with a short summary of what exists and \
whether the tests pass."""

ENVIRONMENTS = {
    "python": "a virtual environment is at .venv (pip and pytest in it) and first on PATH: "
              "python and pip are the project's own; install with python -m pip install.",
    "node": "npm install puts packages in node_modules; node_modules/.bin is on PATH. Never "
            "install globally.",
}
DEFAULT_ENVIRONMENT = "the toolchain's own cache holds downloaded dependencies."


def plan_request(description: str, on_path: dict[str, bool]) -> str:
    """The user message asking for a plan; ``on_path``: ecosystem name → installed."""
    have = [n for n, ok in on_path.items() if ok]
    lack = [n for n, ok in on_path.items() if not ok]
    return PLAN_REQUEST.format(description=description, have=", ".join(have) or "none",
                               lack=", ".join(lack) or "none",
                               names=", ".join(json.dumps(n) for n in ECOSYSTEMS),
                               python_layout=ECOSYSTEMS["python"].layout)


def full_task(description: str, plan: Plan) -> str:
    """The build task for an accepted ``plan``."""
    eco = ECOSYSTEMS[plan.toolchain]
    return FULL_TASK.format(
        description=description, plan="\n".join(f"  {line}" for line in plan.shown()),
        environment=ENVIRONMENTS.get(plan.toolchain, DEFAULT_ENVIRONMENT), layout=eco.layout,
        install=" && ".join(plan.install) if plan.install else "nothing to install",
        test=plan.test)


PLAN_FORMAT = response_format()
