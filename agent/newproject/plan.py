"""The plan a project starts from: toolchain, files, install and test commands.

The model writes it as one JSON object (grammar-forced where the server supports
``response_format``); :func:`parse_plan` reads it and lists, in plain sentences the model can
act on, everything wrong with it; :func:`refusal` says what this machine lacks to build it.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.newproject.toolchains import ECOSYSTEMS, have, missing

MAX_FILES = 40


class Plan(BaseModel):
    """A new project's plan, as the model wrote it (or as the simple recipe fixes it)."""

    model_config = ConfigDict(extra="forbid")
    toolchain: str = Field(description="One of: " + ", ".join(ECOSYSTEMS) + ".")
    language: str = Field(description="The language, e.g. Python 3.11, TypeScript, Rust.")
    summary: str = Field(description="One sentence: what the project is.")
    files: list[str] = Field(description="Every file to write, relative to the project root.")
    install: list[str] = Field(default_factory=list, description="Shell commands that install "
                               "the dependencies into the project (empty when there are none).")
    test: str = Field(description="The shell command that runs the project's tests.")
    run: str = Field("", description="How to run the program, for the README (may be empty).")

    def shown(self) -> list[str]:
        """The plan as a few lines for the terminal."""
        lines = [f"toolchain: {self.toolchain} ({self.language}) - {self.summary}",
                 f"files: {', '.join(self.files)}"]
        if self.install:
            lines.append(f"install: {' && '.join(self.install)}")
        lines.append(f"test: {self.test}")
        if self.run:
            lines.append(f"run: {self.run}")
        return lines


def response_format() -> dict[str, Any]:
    """``response_format`` forcing a :class:`Plan` (toolchain from the known ones)."""
    string = {"type": "string", "maxLength": 300}
    schema = {"type": "object", "additionalProperties": False,
              "required": ["toolchain", "language", "summary", "files", "install", "test",
                           "run"],
              "properties": {
                  "toolchain": {"type": "string", "enum": list(ECOSYSTEMS)},
                  "language": string, "summary": string,
                  "files": {"type": "array", "items": string, "minItems": 1,
                            "maxItems": MAX_FILES},
                  "install": {"type": "array", "items": string, "maxItems": 10},
                  "test": string, "run": string}}
    return {"type": "json_schema",
            "json_schema": {"name": "project_plan", "strict": True, "schema": schema}}


_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?|\n?```\s*$")
_GLOBAL_FLAGS = {"npm": {"-g", "--global", "--location=global"}, "yarn": {"global"},
                 "pnpm": {"-g", "--global"}, "pip": {"--user", "--break-system-packages"}}
_BUILTINS = {"cd", "export", "set", "unset", "source", ".", "[", "test", "true", "false",
             "echo", "printf", "exit", "command", "env"}
# Provided by the project's own environment once it exists (.venv/bin, node_modules/.bin).
_PROJECT_PROVIDED = {"python": {"python", "python3", "pip", "pip3", "pytest"},
                     "node": {"jest", "vitest", "mocha", "tsc", "ts-node", "tsx"}}


def parse_plan(text: str) -> tuple[Plan | None, list[str]]:
    """The plan in the model's reply ``text`` and the problems found; a plan comes back only
    when there are none. Problems are sentences meant for the model (what is wrong, what to
    write instead)."""
    body = _FENCE.sub("", text.strip())
    try:
        data = json.loads(body)
    except ValueError as exc:
        return None, [f"the plan is not valid JSON ({exc}); answer with one JSON object only"]
    if not isinstance(data, dict):
        return None, ["the plan must be one JSON object with the keys toolchain, language, "
                      "summary, files, install, test, run"]
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        return None, [_field_problem(e) for e in exc.errors()]
    problems = check(plan)
    return (None, problems) if problems else (plan, [])


def _field_problem(error: Any) -> str:
    where = ".".join(str(p) for p in error["loc"]) or "the plan"
    field = Plan.model_fields.get(where)
    if error["type"] == "missing" and field is not None:
        return f"'{where}' is missing: {(field.description or '').rstrip('.')}"
    if error["type"] == "extra_forbidden":
        return f"'{where}' is not a plan key; use only: {', '.join(Plan.model_fields)}"
    return f"'{where}': {error['msg']}"


def check(plan: Plan) -> list[str]:
    """What is wrong with ``plan`` regardless of this machine: unknown toolchain, no test
    command, unsafe file paths, installs outside the project."""
    problems = []
    texts = [plan.toolchain, plan.language, plan.summary, *plan.files, *plan.install, plan.test,
             plan.run]
    if any("\x00" in text for text in texts):
        # A NUL byte cannot be in a path or a command line; os calls would raise on it.
        problems.append("the plan contains a NUL character (\\u0000): remove it")
    if plan.toolchain not in ECOSYSTEMS:
        problems.append(f"unknown toolchain '{plan.toolchain}'; use one of: "
                        f"{', '.join(ECOSYSTEMS)}")
    if not plan.test.strip():
        problems.append("'test' is empty: give the command that runs the project's tests "
                        "(every project gets tests)")
    if not plan.files:
        problems.append("'files' is empty: list every file the project needs")
    if len(plan.files) > MAX_FILES:
        problems.append(f"{len(plan.files)} files: plan at most {MAX_FILES}")
    for name in plan.files:
        path = PurePosixPath(name)
        if not name.strip() or path.is_absolute() or ".." in path.parts or (
                path.parts and path.parts[0] == ".git") or len(name) > 255:
            problems.append(f"file '{name}' is not a path inside the project: use a relative "
                            "path such as src/main.py")
    for command in [*plan.install, plan.test]:
        if outside_project(command):
            problems.append(f"'{command}' installs outside the project (sudo, --user, -g): "
                            "dependencies go into the project (.venv for Python, "
                            "node_modules for Node)")
    return problems


def _segments(command: str) -> list[list[str]]:
    """The words of each ``&&``, ``||``, ``;`` or ``|`` segment, ``VAR=value`` words left
    out."""
    out = []
    for segment in re.split(r"&&|\|\||;|\|", command):
        try:
            words = shlex.split(segment)
        except ValueError:
            words = segment.split()
        out.append([w for w in words if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", w)])
    return [words for words in out if words]


def outside_project(command: str) -> bool:
    """Whether ``command`` installs outside the project: ``sudo``, ``npm -g``, ``pip
    --user`` and the like."""
    for words in _segments(command):
        program = PurePosixPath(words[0]).name
        if program == "sudo":
            return True
        tool = "pip" if program.startswith("pip") or "pip" in words[1:3] else program
        if _GLOBAL_FLAGS.get(tool, set()) & set(words[1:]):
            return True
    return False


def executables(command: str) -> list[str]:
    """The programs a shell command line starts (first word of each ``&&``, ``||``, ``;``
    or ``|`` segment, after ``VAR=value`` words); builtins are left out."""
    return [words[0] for words in _segments(command) if words[0] not in _BUILTINS]


def refusal(plan: Plan, path: str) -> str | None:
    """Why this machine cannot build ``plan`` (its toolchain's tools, or a program its
    commands start, not on ``path``) and what to install; None when it can."""
    eco = ECOSYSTEMS[plan.toolchain]
    lacking = missing(eco, path)
    provided = _PROJECT_PROVIDED.get(plan.toolchain, set())
    for command in [*plan.install, plan.test]:
        for program in executables(command):
            if "/" in program or program in provided or program in lacking:
                continue
            if have((program,), path) is None:
                lacking.append(program)
    if not lacking:
        return None
    return (f"the plan needs {', '.join(lacking)} ({eco.language}), not found on PATH: "
            f"install {eco.install_hint}, or ask for a project in another language; nothing "
            "was written")


def simple_plan(module: str) -> Plan:
    """The simple recipe's fixed plan: one Python module and its pytest file."""
    return Plan(toolchain="python", language="Python", summary="one module with pytest tests",
                files=[f"{module}.py", f"tests/test_{module}.py"], install=[],
                test="python -m pytest -q")
