"""The plan a project starts from: toolchain, files, install and test commands.

The model writes it as one JSON object (grammar-forced where the server supports
``response_format``); :func:`parse_plan` reads it and lists, in plain sentences the model can
act on, everything wrong with it; :func:`refusal` says what this machine lacks to build it.
"""

from __future__ import annotations

import json
import posixpath
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
_GLOBAL_FLAGS = {"npm": {"-g", "--global"}, "yarn": {"global"}, "pnpm": {"-g", "--global"},
                 "pip": {"--user", "--break-system-packages", "--system"}}
# Flags whose value is a folder: outside the project when it is absolute, under ~ or above it.
_FOLDER_FLAGS = {"npm": {"--prefix", "--location"}, "pnpm": {"--dir"},
                 "pip": {"--target", "-t", "--prefix", "--root"}}
# Installers whose every install lands outside the project (the machine, ~/.cargo/bin, ...).
_GLOBAL_INSTALLERS = {"apt", "apt-get", "aptitude", "dnf", "yum", "apk", "pacman", "zypper",
                      "brew", "snap", "port", "pipx", "cargo install", "go install",
                      "gem install", "rustup", "npm config", "pip config"}
_OTHER_USER = {"sudo", "doas", "su", "pkexec", "runuser"}
# Words that run the rest of the line as the command (``env sudo x`` is ``sudo x``).
_WRAPPERS = {"env", "command", "exec", "nohup", "time", "nice", "builtin"}
_SHELLS = {"sh", "bash", "dash", "zsh"}
_BUILTINS = {"cd", "pushd", "export", "set", "unset", "source", ".", "[", "test", "true",
             "false", "echo", "printf", "exit", "command", "env"}
# A shell redirection such as 2>&1 or &>out, taken out before the line is split at '&'.
_REDIRECT = re.compile(r"\d*[<>]&\d*-?|&>>?")
# Where one command of a line ends: && || ; | & a newline, a subshell or a substitution.
_SEPARATOR = re.compile(r"&&|\|\||[;|&\n(){}`]|\$\(")
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
    # `run` too: it is given to the model, which may try it, and written into the README.
    for command in [*plan.install, plan.test, plan.run]:
        why = outside_project(command)
        if why:
            problems.append(f"'{command}' {why}: commands run inside the project folder and "
                            "dependencies go into the project (.venv for Python, "
                            "node_modules for Node), as the user who runs dflash-agent")
    return problems


def _segments(command: str) -> list[list[str]]:
    """The words of each command on the line (split at ``&&``, ``||``, ``;``, ``|``, ``&``,
    newlines, subshells and substitutions), leading ``VAR=value`` words and wrappers such as
    ``env`` or ``exec`` left out."""
    out = []
    for segment in _SEPARATOR.split(_REDIRECT.sub(" ", command)):
        try:
            words = shlex.split(segment)
        except ValueError:
            words = segment.split()
        wrapped = False
        while words and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0])
                         or words[0] in _WRAPPERS or (wrapped and words[0].startswith("-"))):
            wrapped = wrapped or words[0] in _WRAPPERS
            words = words[1:]
        out.append(words)
    return [words for words in out if words]


def _outside_folder(value: str) -> bool:
    """Whether the folder ``value`` (relative to the project root) is outside it."""
    if value.startswith(("/", "~", "$")) or "/~" in value or "/$" in value:
        return True
    return posixpath.normpath(value).split("/")[0] == ".."


def _flag_values(words: list[str], flags: set[str]) -> list[str]:
    """The values given to ``flags`` in ``words`` (``--flag value`` and ``--flag=value``)."""
    values = []
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name in flags:
            values.append(value if eq else (words[i + 1] if i + 1 < len(words) else ""))
    return values


def outside_project(command: str) -> str | None:
    """Why ``command`` reaches outside the project (another user's rights, a global or user
    install, a folder outside it), or None when it stays inside. Commands run through
    ``sh -c`` are checked too; a script the command runs is not read."""
    here = "."  # where the line's earlier `cd`s went, relative to the project root
    for words in _segments(command):
        program = PurePosixPath(words[0]).name
        if program in _OTHER_USER:
            return f"runs as another user ({program})"
        if program in _SHELLS and "-c" in words[1:-1]:
            inner = outside_project(words[words.index("-c") + 1])
            if inner:
                return inner
        if program in ("cd", "pushd"):
            target = words[1] if len(words) > 1 else "~"  # a bare cd goes home
            if target == "-" or _outside_folder(posixpath.join(here, target)):
                return f"leaves the project ({' '.join(words[:2])})"
            here = posixpath.normpath(posixpath.join(here, target))
        sub = f"{program} {words[1]}" if len(words) > 1 else program
        if program in _GLOBAL_INSTALLERS or sub in _GLOBAL_INSTALLERS:
            return f"installs outside the project ({sub})"
        tool = "pip" if program.startswith("pip") or "pip" in words[1:3] else program
        names = {w.partition("=")[0] for w in words[1:]}
        if _GLOBAL_FLAGS.get(tool, set()) & names:
            return "installs outside the project (sudo, --user, -g)"
        folders = _flag_values(words[1:], _FOLDER_FLAGS.get(tool, set()))
        if any(v in ("global", "user") or _outside_folder(v) for v in folders):
            return "installs outside the project (a folder outside it)"
    return None


def executables(command: str) -> list[str]:
    """The programs a shell command line starts (first word of each command on the line,
    after ``VAR=value`` words and wrappers); builtins are left out."""
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
