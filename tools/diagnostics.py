"""What is wrong with a file right after an edit, told in the edit's result.

Peers show a language server's diagnostics after each edit (OpenCode, Claude Code's IDE
integration); a small model otherwise learns of its broken file only when a test fails, or
never: Qwen2.5-Coder-1.5B wrapped every function of numtools.py in stray triple quotes, did not
run anything, and said the edge cases were fixed (issue 49); renaming a function, it dropped
the ``tax`` parameter its body still used (the task benchmark's rename-function).

Two levels. :func:`problem`: the file does not parse — Python by its own compiler (``compile``
only parses; nothing runs), JSON, TOML and YAML by their parsers, JavaScript by
``node --check`` where node is on PATH. :func:`new_errors`: errors in a Python file that parses,
from pyflakes (undefined names and the other errors Python raises only when the line runs),
only those the edit brought in (compared with the file before it), capped. A checker that
hangs or crashes is a note, never a failed edit.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import tomllib
import warnings
from collections import Counter
from pathlib import Path

import yaml
from pyflakes import checker

MAX_BYTES = 2 * 1024 * 1024
"""Files larger than this are not checked (generated or data files)."""
MAX_ERRORS = 5
"""New errors listed after an edit; the rest are counted."""
NODE_TIMEOUT_S = 10.0
JS_SUFFIXES = {".js", ".mjs", ".cjs"}
PYFLAKES_ERRORS = {"UndefinedName", "UndefinedLocal", "UndefinedExport", "DuplicateArgument",
                   "ReturnOutsideFunction", "YieldOutsideFunction", "ContinueOutsideLoop",
                   "BreakOutsideLoop", "TwoStarredExpressions",
                   "TooManyExpressionsInStarredAssignment", "PercentFormatInvalidFormat",
                   "StringDotFormatInvalidFormat"}
"""pyflakes messages that are errors when the line runs (a NameError, a SyntaxError at
import, a ValueError from a bad format string); its style findings (unused imports and
variables) are left to the project's linter."""


def _read(path: Path) -> bytes | None:
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        return path.read_bytes()
    except OSError:
        return None


def _node_check(path: Path) -> str | None:
    """``node --check`` on a JavaScript file: why it does not parse, or None (it parses, or node
    is not on PATH). A node that hangs or crashes is said as such."""
    node = shutil.which("node")
    if node is None:
        return None
    try:
        proc = subprocess.run([node, "--check", str(path)], capture_output=True, text=True,
                              timeout=NODE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"(not checked: node --check did not finish in {NODE_TIMEOUT_S:.0f} s)"
    except OSError as exc:
        return f"(not checked: node --check did not run: {exc.strerror or exc})"
    if proc.returncode == 0:
        return None
    lines = [line.strip() for line in proc.stderr.splitlines() if line.strip()]
    error = next((line for line in lines if "Error" in line), lines[-1] if lines else "")
    where = lines[0].rsplit(":", 1)[-1] if lines and ":" in lines[0] else ""
    at = f" at line {where}" if where.isdigit() else ""
    if not error:
        return f"(not checked: node --check exited {proc.returncode})"
    return f"{error}{at}"


def _data_problem(suffix: str, data: bytes) -> str | None:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    try:
        if suffix == ".json":
            json.loads(text)
        elif suffix == ".toml":
            tomllib.loads(text)
        else:
            list(yaml.safe_load_all(text))
    except json.JSONDecodeError as exc:
        return f"not valid JSON: {exc}"
    except tomllib.TOMLDecodeError as exc:
        return f"not valid TOML: {exc}"
    except yaml.YAMLError as exc:
        return "not valid YAML: " + " ".join(str(exc).split())
    except (ValueError, RecursionError) as exc:
        return f"not valid {suffix[1:].upper()}: {exc}"
    return None


def problem(path: Path) -> str | None:
    """One line saying why the file at ``path`` does not parse (``SyntaxError at line 3: ...``),
    or None: it parses, is of a kind not checked, is too large, cannot be read, or its checker
    did not give an answer."""
    found = _problem(path)
    return None if found is None or found.startswith("(not checked") else found


def _problem(path: Path) -> str | None:
    """:func:`problem`, or ``(not checked: WHY)`` when the checker hung or crashed."""
    suffix = path.suffix.lower()
    if suffix not in {".py", ".json", ".toml", ".yaml", ".yml", *JS_SUFFIXES}:
        return None
    data = _read(path)
    if data is None:
        return None
    if suffix in JS_SUFFIXES:
        return _node_check(path)
    if suffix != ".py":
        return _data_problem(suffix, data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning for odd escapes is not an error
            compile(data, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        where = f" at line {exc.lineno}" if exc.lineno else ""
        text = f": {exc.text.strip()}" if exc.text and exc.text.strip() else ""
        return f"{type(exc).__name__}{where}: {exc.msg}{text}"
    except ValueError as exc:  # a NUL byte in the source
        return f"not Python source: {exc}"
    return None


def _pyflakes(data: bytes, name: str) -> list[tuple[int, str]]:
    """(line, message) of each error pyflakes finds in Python source that parses."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(data, filename=name)
        found = checker.Checker(tree, filename=name).messages
    except (SyntaxError, ValueError, RecursionError):
        return []
    return sorted((m.lineno, m.message % m.message_args) for m in found
                  if type(m).__name__ in PYFLAKES_ERRORS)


def new_errors(path: Path, before: bytes | None) -> list[str]:
    """``LINE: MESSAGE`` for each error in the Python file ``path`` that its content
    ``before`` the edit (None: a new file) did not have, at most :data:`MAX_ERRORS` and a
    count of the rest; [] for other files, files that do not parse (:func:`problem` says
    why) and files that cannot be read."""
    if path.suffix.lower() != ".py":
        return []
    data = _read(path)
    if data is None:
        return []
    old = Counter(m for _, m in _pyflakes(before, path.name)) if before else Counter()
    fresh = []
    for line, message in _pyflakes(data, path.name):
        if old[message] > 0:
            old[message] -= 1  # the same error, moved by the edit
        else:
            fresh.append(f"{line}: {message}")
    if len(fresh) > MAX_ERRORS:
        fresh = [*fresh[:MAX_ERRORS], f"and {len(fresh) - MAX_ERRORS} more"]
    return fresh


def note(path: Path, shown: str, before: bytes | None = None) -> str:
    """The lines an edit's result ends with: the edited file ``path`` (named ``shown``) does
    not parse, or the errors the edit brought in (``before``: its content before the edit,
    None for a new file); else ``""``."""
    found = _problem(path)
    if found:
        if found.startswith("(not checked"):
            return f"\n[{shown}: {found.strip('()')}]"
        return f"\n[problem: {shown} does not parse: {found}]"
    errors = new_errors(path, before)
    if not errors:
        return ""
    lines = "\n".join(f"  {shown}:{e}" if e[0].isdigit() else f"  {e}" for e in errors)
    return f"\n[problem: errors this edit brought in (pyflakes); fix them:\n{lines}]"
