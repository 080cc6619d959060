"""Synthetic agent sessions: many small coding sessions over real Python source, recorded with
the agent's real tools, as training prompts shaped like the agent's own turns.

Each session is written in the fixture format of ``benchmarks/agent_sessions/*.json`` and
recorded by :func:`benchmarks.agent_sessions.make_sessions.play` (imported, not copied):
every tool result is what the tool really returned in a temporary workspace.
:mod:`train.agent_requests` then renders them like the fixtures, under their own source group
(``agent-synth-<protocol>``), so the held-out ``agent-text`` figure keeps meaning the fixture
session ``textstats-errors``.

A session's workspace is one module of at most ``max_lines`` lines taken from a source tree
(the standard library by default; :func:`train.coding_prompts.source_files` picks the files):
the whole module when it is that short, else its imports and whole top-level definitions that
fit, in the file's order. It must import cleanly (checked with the ``python`` the ``bash``
tool runs), and it is renamed when its name would shadow an importable module (``json.py``
would break pytest). Sometimes a ``tests/test_<module>.py`` smoke test, a ``README.md`` and a
``.gitignore`` sit beside it. The task is one of:

- ``rename`` — a top-level function and every use (and the test that names it);
- ``docstring`` — add one to a function without, or cut a long one to its first sentence;
- ``default`` — change a parameter's numeric or boolean default;
- ``message`` — change an error message;
- ``import-bug`` — a planted typo in an import line: the import check fails, is fixed,
  passes;
- ``name-bug`` — a planted misspelt parameter in a function body, reported as a NameError.

Turns (3–7): views (``.``, the module, a line range, the test file), the ``str_replace``
edits (each ``old_str`` the file's exact, unique text), sometimes a new test file, a ``bash``
run of ``python -m pytest -q`` or ``python -c "import <module>"`` whose pass or fail
``play()`` checks, and a ``final_answer``. Everything is drawn from one seeded generator: the
same sources and seed give the same sessions (pytest's run time in its summary line aside).
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import json
import keyword
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.agent_sessions.make_sessions import SessionSpec, Step, play
from train.coding_prompts import source_files
from train.errors import InputError, TrainError

PREFIX = "synth-"
"""Names of synthetic sessions start so; :mod:`train.agent_requests` groups them by it."""
TEST_COMMAND = "python -m pytest -q"
MAX_LINES = 150
MAX_TURNS = 7
SKIP_MODULES = {"antigravity", "this", "__main__", "__phello__", "setup", "conftest"}
"""Modules whose import does something (a browser, a print) or that are not library code."""
RESERVED = {"pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py",
            "conftest", "tests", "test", "setup"}
"""Names a workspace module must not take: pytest imports these."""
SUFFIXES = ("utils", "lite", "helpers", "core", "tools", "mod")
TASK_WEIGHTS = {"rename": 3, "docstring": 3, "default": 4, "message": 5, "import-bug": 1,
                "name-bug": 2}
VERBS = {"get": "Return", "is": "Return True when", "has": "Return True when it has",
         "to": "Convert to", "make": "Build", "build": "Build", "create": "Create",
         "parse": "Parse", "read": "Read", "write": "Write", "load": "Load", "find": "Find",
         "check": "Check", "format": "Format", "split": "Split", "join": "Join",
         "add": "Add", "remove": "Remove", "set": "Set", "update": "Update", "compute":
         "Compute", "convert": "Convert", "encode": "Encode", "decode": "Decode",
         "quote": "Quote", "escape": "Escape", "normalize": "Normalize", "run": "Run"}
RENAMES = {"get": "fetch", "make": "build", "build": "make", "create": "new", "parse": "read",
           "read": "load", "load": "read", "find": "lookup", "check": "validate",
           "compute": "calc", "format": "render", "split": "divide", "is": "is",
           "to": "as", "write": "save", "remove": "drop", "add": "append", "update": "refresh"}
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


# --- the workspace module ----------------------------------------------------------------------


class Python:
    """The ``python`` the ``bash`` tool runs (first on PATH), resolved once, for the import
    checks that decide which modules a session may use."""

    def __init__(self) -> None:
        if shutil.which("python") is None:
            raise TrainError("no `python` on PATH: the sessions' bash calls run `python -c` "
                             "and `python -m pytest`")
        done = subprocess.run(["python", "-c", "import sys; print(sys.executable)"],
                              capture_output=True, text=True, timeout=60)
        self.exe = done.stdout.strip() or "python"

    def imports(self, name: str, text: str) -> bool:
        """True when a folder holding only ``<name>.py`` = ``text`` can import it."""
        with tempfile.TemporaryDirectory(prefix="synth-check-") as tmp:
            (Path(tmp) / f"{name}.py").write_text(text, "utf-8")
            try:
                done = subprocess.run([self.exe, "-c", f"import {name}"], cwd=tmp,
                                      capture_output=True, timeout=20,
                                      stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                return False
            return done.returncode == 0


def _taken(name: str) -> bool:
    if name in RESERVED or name in sys.stdlib_module_names or keyword.iskeyword(name):
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return True


def _module_name(path: Path, rng: random.Random) -> str | None:
    stem = path.parent.name if path.stem == "__init__" else path.stem
    stem = re.sub(r"\W", "_", stem.lower()).strip("_")
    if not stem or stem in SKIP_MODULES or stem[0].isdigit():
        return None
    for suffix in [None, *rng.sample(SUFFIXES, len(SUFFIXES))]:
        name = f"{stem}_{suffix}" if suffix else stem
        if not _taken(name):
            return name
    return None


def _segment(lines: list[str], node: ast.stmt) -> str:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return "".join(lines[first - 1:node.end_lineno])


def module_text(source: str, rng: random.Random, max_lines: int = MAX_LINES) -> str | None:
    """The workspace module made from ``source``: all of it when it has at most
    ``max_lines`` lines, else its docstring (when short), its absolute imports, the short
    assignments the chosen definitions name, and the whole top-level definitions that fit
    (from a random one on, in the file's order); None
    when no such text parses or has a definition."""
    if "\t" in source or "\r" in source or "\f" in source:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    lines = source.splitlines(keepends=True)
    tops = [n for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    if not _functions(tree):
        return None
    if len(lines) <= max_lines:
        whole = source if source.endswith("\n") else source + "\n"
        return whole if _runs_at_import(tree) and _short_lines(whole) else None
    budget = rng.randint(min(40, max_lines), max_lines)
    head: list[str] = []
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str) and body[0].end_lineno - body[0].lineno < 8:
        head.append(_segment(lines, body[0]))
    imports = [_segment(lines, n) for n in body
               if isinstance(n, ast.Import) or (isinstance(n, ast.ImportFrom) and not n.level)]
    start = rng.randrange(len(tops))
    chosen: list[ast.stmt] = []
    used = sum(t.count("\n") for t in head + imports) + 4
    for node in tops[start:] + tops[:start]:  # the defs that fit, in the file's order
        size = _segment(lines, node).count("\n") + 2
        if used + size <= budget:
            chosen.append(node)
            used += size
    chosen.sort(key=lambda n: n.lineno)
    if not chosen:
        return None
    names = {n.id for c in chosen for n in ast.walk(c) if isinstance(n, ast.Name)}
    assigns = []
    for n in body:
        if isinstance(n, ast.Assign | ast.AnnAssign) and n.end_lineno - n.lineno < 3:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(isinstance(t, ast.Name) and t.id in names for t in targets):
                assigns.append(_segment(lines, n))
    parts = ["".join(head), "".join(imports), "".join(assigns)]
    text = "\n".join(p for p in parts if p)
    text += "\n\n" + "\n\n".join(_segment(lines, c) for c in chosen)
    text = text.lstrip("\n")
    if text.count("\n") > max_lines:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    return text if _runs_at_import(tree) and _short_lines(text) else None


def _short_lines(text: str) -> bool:
    return all(len(line) <= 100 for line in text.splitlines())


def _import_time_names(node: ast.AST, lazy_annotations: bool) -> list[str]:
    """Names an import of the module loads while running ``node`` (a top-level or class-body
    statement): a function's decorators, defaults and, unless postponed, annotations; a
    class's bases, keywords, decorators and body; anything else whole."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        args = node.args
        parts: list[ast.AST] = [*node.decorator_list, *args.defaults,
                                *[d for d in args.kw_defaults if d]]
        if not lazy_annotations:
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg,
                     args.kwarg]
            parts += [a.annotation for a in every if a is not None and a.annotation]
            parts += [node.returns] if node.returns else []
        return [n.id for p in parts for n in ast.walk(p) if isinstance(n, ast.Name)]
    if isinstance(node, ast.ClassDef):
        names = [n.id for p in [*node.bases, *node.keywords, *node.decorator_list]
                 for n in ast.walk(p) if isinstance(n, ast.Name)]
        for stmt in node.body:
            names += _import_time_names(stmt, lazy_annotations)
        return names
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)]


def _runs_at_import(tree: ast.Module) -> bool:
    """False when importing the module would certainly fail: a relative import, or a name
    loaded at import time that nothing defines (a definition left out of the subset)."""
    defined = set(dir(builtins)) | {"__name__", "__file__", "__doc__", "__spec__"}
    lazy = False
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            return False
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            lazy = lazy or any(a.name == "annotations" for a in node.names)
        if isinstance(node, ast.Import | ast.ImportFrom):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            defined.add(node.id)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    used = [n for stmt in tree.body for n in _import_time_names(stmt, lazy)]
    return all(n in defined for n in used)


# --- edits -------------------------------------------------------------------------------------


@dataclass
class Edit:
    path: str
    old: str
    new: str


@dataclass
class Plan:
    """What a task does: its sentence, its edits (``planted``: the bug the workspace starts
    with, ``(clean text, buggy text)``), the line to look at and the summary."""

    kind: str
    task: str
    edits: list[Edit]
    line: int
    summary: str
    planted: tuple[str, str] | None = None
    test_names: dict[str, str] = field(default_factory=dict)


def _unique(text: str, first: int, last: int) -> tuple[str, int, int] | None:
    """Lines ``first``..``last`` (0-based) of ``text``, without the last newline, grown down
    (then up) until they occur once: (old_str, first, last)."""
    lines = text.splitlines(keepends=True)
    a, b = first, last
    while True:
        chunk = "".join(lines[a:b + 1]).rstrip("\n")
        if chunk.strip() and text.count(chunk) == 1:
            return chunk, a, b
        if b + 1 < len(lines) and b - first < 6:
            b += 1
        elif a > 0 and first - a < 4:
            a -= 1
        else:
            return None


def _line_edit(path: str, text: str, changes: dict[int, str]) -> Edit | None:
    """One str_replace changing the 0-based lines in ``changes`` to their new text."""
    found = _unique(text, min(changes), max(changes))
    if found is None:
        return None
    old, a, b = found
    lines = text.splitlines(keepends=True)
    new_lines = [changes.get(i, lines[i].rstrip("\n")) for i in range(a, b + 1)]
    return Edit(path, old, "\n".join(line.rstrip("\n") for line in new_lines))


def _functions(tree: ast.Module) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """Top-level functions and methods, with how the text names them (``f``, ``C.f``)."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out.append((node, node.name))
        elif isinstance(node, ast.ClassDef):
            out += [(n, f"{node.name}.{n.name}") for n in node.body
                    if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return out


def _words(name: str) -> list[str]:
    return [w for w in name.strip("_").split("_") if w]


def _new_name(name: str, text: str, rng: random.Random) -> str | None:
    words = _words(name)
    if not words:
        return None
    lead = "_" if name.startswith("_") else ""
    if words[0] in RENAMES and len(words) > 1 and RENAMES[words[0]] != words[0]:
        options = [RENAMES[words[0]] + "_" + "_".join(words[1:])]
    else:
        options = ["_".join(words) + "_" + s for s in ("value", "text", "items", "all")]
        options += ["_".join(["do", *words])]
    new = lead + rng.choice(options)
    return None if re.search(rf"\b{re.escape(new)}\b", text) or _taken(new) else new


def plan_rename(mod: str, text: str, tree: ast.Module, tests: str | None,
                rng: random.Random) -> Plan | None:
    path = f"{mod}.py"
    candidates = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("__"):
            continue
        uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == node.name]
        defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef)
                and n.name == node.name]
        spoken = len(re.findall(rf"\b{re.escape(node.name)}\b", text))
        if len(defs) == 1 and spoken == len(uses) + 1 and len(uses) <= 4:
            candidates.append((node, uses))
    if not candidates:
        return None
    node, uses = rng.choice(candidates)
    old = node.name
    new = _new_name(old, text, rng)
    if new is None:
        return None
    lines = text.splitlines()
    changes: dict[int, str] = {}
    for line_no in sorted({node.lineno, *(u.lineno for u in uses)}):
        changes[line_no - 1] = re.sub(rf"\b{re.escape(old)}\b", new,
                                      changes.get(line_no - 1, lines[line_no - 1]))
    # Nearby lines go into one edit, as a model would write them.
    groups: list[list[int]] = []
    for i in sorted(changes):
        if groups and i - groups[-1][0] <= 4:
            groups[-1].append(i)
        else:
            groups.append([i])
    if len(groups) > 3:
        return None
    edits, current = [], text
    for group in groups:
        edit = _line_edit(path, current, {i: changes[i] for i in group})
        if edit is None:
            return None
        current = current.replace(edit.old, edit.new, 1)
        edits.append(edit)
    test_names = {}
    if tests and re.search(rf"\b{re.escape(old)}\b", tests):
        test_path = f"tests/test_{mod}.py"
        t_lines = tests.splitlines()
        t_changes = {i: re.sub(rf"\b{re.escape(old)}\b", new, line)
                     for i, line in enumerate(t_lines) if re.search(rf"\b{re.escape(old)}\b",
                                                                    line)}
        if max(t_changes) - min(t_changes) > 8:
            return None
        edit = _line_edit(test_path, tests, t_changes)
        if edit is None:
            return None
        edits.append(edit)
        test_names[old] = new
    where = f"the definition and {len(uses)} use{'s' if len(uses) != 1 else ''}" if uses \
        else "its definition (it has no other use in the module)"
    task = rng.choice([
        f"Rename the function `{old}` in {path} to `{new}` and update every use.",
        f"`{old}` is a poor name. Rename it to `{new}` everywhere in the project.",
        f"Please rename {old}() to {new}() in {path}; keep the behaviour the same.",
    ])
    tail = " and the test that names it" if test_names else ""
    summary = f"Renamed `{old}` to `{new}` in {path}: {where}{tail}."
    return Plan("rename", task, edits, node.lineno, summary, test_names=test_names)


def _doc_for(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    words = _words(node.name) or ["value"]
    args = [a.arg for a in node.args.args if a.arg not in {"self", "cls"}]
    verb = VERBS.get(words[0])
    rest = " ".join(words[1:] if verb else words)
    if verb is None:
        verb = "Handle" if rest else "Return"
    text = f"{verb} {rest}".strip() if rest else f"{verb} the result"
    if args:
        text += " for " + " and ".join(f"``{a}``" for a in args[:2])
    return text + "."


def plan_docstring(mod: str, text: str, tree: ast.Module, tests: str | None,
                   rng: random.Random) -> Plan | None:
    path = f"{mod}.py"
    lines = text.splitlines()
    add, cut = [], []
    for node, label in _functions(tree):
        first = node.body[0]
        if first.lineno == node.lineno:
            continue
        doc = ast.get_docstring(node)
        if doc is None and not label.split(".")[-1].startswith("__"):
            add.append((node, label))
        elif doc and first.end_lineno - first.lineno >= 2:
            sentence = " ".join(doc.split("\n\n")[0].split())
            sentence = sentence.split(". ")[0].rstrip(".") + "."
            raw = "\n".join(lines[first.lineno - 1:first.end_lineno])
            if 10 < len(sentence) < 80 and '"' not in sentence and "\\" not in sentence \
                    and raw.lstrip().startswith('"""'):
                cut.append((node, label, sentence))
    if add and (not cut or rng.random() < 0.5):
        node, label = rng.choice(add)
        doc = _doc_for(node)
        body = node.body[0]
        indent = re.match(r"\s*", lines[body.lineno - 1]).group(0)
        changes = {i: lines[i] for i in range(node.lineno - 1, body.lineno - 1)}
        last = body.lineno - 2
        changes[last] = lines[last] + "\n" + f'{indent}"""{doc}"""'
        edit = _line_edit(path, text, changes)
        if edit is None:
            return None
        task = rng.choice([
            f"Add a one-line docstring to `{label}` in {path}.",
            f"{label}() in {path} has no docstring. Write one saying what it does.",
        ])
        return Plan("docstring", task, [edit], node.lineno,
                    f"Added a docstring to `{label}` in {path}: \"{doc}\"")
    if not cut:
        return None
    node, label, sentence = rng.choice(cut)
    body = node.body[0]
    indent = re.match(r"\s*", lines[body.lineno - 1]).group(0)
    old = "\n".join(lines[body.lineno - 1:body.end_lineno])
    if text.count(old) != 1:
        return None
    task = rng.choice([
        f"The docstring of `{label}` in {path} is too long. Cut it to its first sentence.",
        f"Shorten the docstring of {label}() to one line: keep only the first sentence.",
    ])
    return Plan("docstring", task, [Edit(path, old, f'{indent}"""{sentence}"""')],
                body.lineno, f"Cut the docstring of `{label}` in {path} to one line: "
                f"\"{sentence}\"")


def plan_default(mod: str, text: str, tree: ast.Module, tests: str | None,
                 rng: random.Random) -> Plan | None:
    path = f"{mod}.py"
    found = []
    for node, label in _functions(tree):
        args = node.args
        positional = args.posonlyargs + args.args
        pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults,
                         strict=True))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d]
        for arg, default in pairs:
            if isinstance(default, ast.Constant) and type(default.value) in (int, bool, float) \
                    and default.lineno == default.end_lineno:
                found.append((label, arg.arg, default))
    if not found:
        return None
    label, name, default = rng.choice(found)
    value = default.value
    if isinstance(value, bool):
        new = repr(not value)
    elif isinstance(value, int):
        new = str(value * 2 if value > 1 else value + 1)
    else:
        new = repr(round(value * 2, 6) if value else 1.0)
    lines = text.splitlines()
    line = lines[default.lineno - 1]
    old_text = line[default.col_offset:default.end_col_offset]
    if old_text != repr(value) and not (isinstance(value, float) or old_text.isdigit()):
        return None
    changed = line[:default.col_offset] + new + line[default.end_col_offset:]
    edit = _line_edit(path, text, {default.lineno - 1: changed})
    if edit is None:
        return None
    task = rng.choice([
        f"Change the default of `{name}` in `{label}()` ({path}) from {old_text} to {new}.",
        f"In {path}, {label}() should default to {name}={new} instead of {old_text}.",
    ])
    return Plan("default", task, [edit], default.lineno,
                f"{label}() in {path} now defaults to {name}={new} (was {old_text}).")


def plan_message(mod: str, text: str, tree: ast.Module, tests: str | None,
                 rng: random.Random) -> Plan | None:
    path = f"{mod}.py"
    lines = text.splitlines()
    found = []
    for node, label in _functions(tree):
        for sub in ast.walk(node):
            if isinstance(sub, ast.Raise) and isinstance(sub.exc, ast.Call) and sub.exc.args:
                arg = sub.exc.args[0]
                if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod):
                    arg = arg.left  # "... %r" % (value,): the literal is the message
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) \
                        and arg.lineno == arg.end_lineno and 3 < len(arg.value) < 70:
                    raw = lines[arg.lineno - 1][arg.col_offset:arg.end_col_offset]
                    if raw[0] in "'\"" and raw[1:-1] == arg.value and "\\" not in raw:
                        found.append((label, arg, raw[0]))
    if not found:
        return None
    label, arg, quote = rng.choice(found)
    msg = arg.value
    options = [f"{label.split('.')[-1]}: {msg}"]
    if msg[0].islower():
        options.append(msg[0].upper() + msg[1:])
    if not msg.endswith((".", "!", "?", ":")):
        options.append(msg + ".")
    new_msg = rng.choice(options)
    if quote in new_msg:
        return None
    line = lines[arg.lineno - 1]
    changed = line[:arg.col_offset] + quote + new_msg + quote + line[arg.end_col_offset:]
    edit = _line_edit(path, text, {arg.lineno - 1: changed})
    if edit is None:
        return None
    task = rng.choice([
        f"In {path}, change the error message {json.dumps(msg)} raised by {label}() to "
        f"{json.dumps(new_msg)}.",
        f"Make {label}() in {path} raise with the message {json.dumps(new_msg)} instead of "
        f"{json.dumps(msg)}.",
    ])
    return Plan("message", task, [edit], arg.lineno,
                f"{label}() in {path} now raises with {json.dumps(new_msg)}.")


def _typo(word: str, rng: random.Random) -> str | None:
    if len(word) < 4:
        return None
    i = rng.randrange(1, len(word) - 1)
    if rng.random() < 0.5:
        return word[:i] + word[i + 1:]
    return word[:i] + word[i + 1] + word[i] + word[i + 2:] if word[i] != word[i + 1] else None


def plan_import_bug(mod: str, text: str, tree: ast.Module, tests: str | None,
                    rng: random.Random) -> Plan | None:
    path = f"{mod}.py"
    found = [n for n in tree.body if (isinstance(n, ast.Import) or (
        isinstance(n, ast.ImportFrom) and not n.level and n.module != "__future__"))
        and n.lineno == n.end_lineno]
    if not found:
        return None
    node = rng.choice(found)
    target = node.names[0].name if isinstance(node, ast.Import) else node.module
    assert target is not None
    last = target.split(".")[-1]
    bad = _typo(last, rng)
    if bad is None or _taken(bad):
        return None
    lines = text.splitlines()
    line = lines[node.lineno - 1]
    bad_line = re.sub(rf"\b{re.escape(last)}\b", bad, line, count=1)
    if bad_line == line:
        return None
    buggy = text.replace(line + "\n", bad_line + "\n", 1)
    edit = _line_edit(path, buggy, {node.lineno - 1: line})
    if edit is None:
        return None
    task = rng.choice([
        f"`python -c \"import {mod}\"` fails. Find out why and fix it.",
        f"Importing {mod} raises an error since my last change. Please fix it.",
        f"{path} does not import any more. Fix the module so `import {mod}` works again.",
    ])
    return Plan("import-bug", task, [edit], node.lineno,
                f"The import line of {path} misspelt `{last}` as `{bad}`; fixed it, and "
                f"`import {mod}` works again.", planted=(text, buggy))


def plan_name_bug(mod: str, text: str, tree: ast.Module, tests: str | None,
                  rng: random.Random) -> Plan | None:
    path = f"{mod}.py"
    found = []
    for node, label in _functions(tree):
        params = {a.arg for a in node.args.args + node.args.kwonlyargs} - {"self", "cls"}
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) \
                    and sub.id in params and sub.lineno > node.body[0].lineno - 1:
                found.append((label, sub))
    if not found:
        return None
    label, name = rng.choice(found)
    bad = _typo(name.id, rng)
    if bad is None or re.search(rf"\b{re.escape(bad)}\b", text) or bad in dir(builtins) \
            or keyword.iskeyword(bad):
        return None
    lines = text.splitlines()
    line = lines[name.lineno - 1]
    bad_line = line[:name.col_offset] + bad + line[name.end_col_offset:]
    buggy = "\n".join(lines[:name.lineno - 1] + [bad_line] + lines[name.lineno:]) + "\n"
    edit = _line_edit(path, buggy, {name.lineno - 1: line})
    if edit is None:
        return None
    task = rng.choice([
        f"Calling {label}() fails with NameError: name '{bad}' is not defined. Fix it.",
        f"There is a typo in {label}() in {path}: it raises NameError for `{bad}`. Please "
        "fix it.",
    ])
    return Plan("name-bug", task, [edit], name.lineno,
                f"{label}() in {path} used `{bad}` where it meant its parameter `{name.id}`; "
                "fixed.", planted=(text, buggy))


PLANNERS: dict[str, Callable[..., Plan | None]] = {
    "rename": plan_rename, "docstring": plan_docstring, "default": plan_default,
    "message": plan_message, "import-bug": plan_import_bug, "name-bug": plan_name_bug}


# --- side files --------------------------------------------------------------------------------


def _public(tree: ast.Module) -> list[tuple[str, bool]]:
    """(name, is a class) of the module's top-level definitions, public ones first."""
    tops = [(n.name, isinstance(n, ast.ClassDef)) for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)]
    public = [t for t in tops if not t[0].startswith("_")]
    return (public or tops)[:4]


def smoke_test(mod: str, tree: ast.Module, rng: random.Random) -> str:
    """A small pytest file: the module's public names exist (two styles)."""
    names = _public(tree)
    if rng.random() < 0.5:
        listed = ", ".join(json.dumps(n) for n, _ in names)
        if len(names) == 1:
            listed += ","
        return (f"import {mod}\n\n\ndef test_public_names():\n    for name in ({listed}):\n"
                f"        assert hasattr({mod}, name), name\n")
    out = [f"from {mod} import {', '.join(n for n, _ in names)}\n"]
    for name, is_class in names:
        check = f"isinstance({name}, type)" if is_class else f"callable({name})"
        out.append(f"\n\ndef test_{name.strip('_').lower()}_is_there():\n    assert {check}\n")
    return "".join(out)


def readme(mod: str, tree: ast.Module) -> str:
    doc = ast.get_docstring(tree) or ""
    first = " ".join(doc.split("\n\n")[0].split()) if doc else ""
    about = first if 10 < len(first) < 300 else f"The `{mod}` module."
    names = ", ".join(f"`{n}`" for n, _ in _public(tree))
    return (f"# {mod}\n\n{about}\n\nIt defines {names}.\n\n```python\nimport {mod}\n```\n\n"
            f"Run the tests with `{TEST_COMMAND}`.\n")


# --- sessions ----------------------------------------------------------------------------------


@dataclass
class Made:
    """A session spec and the file it came from."""

    spec: Any
    origin: str
    kind: str


def _view_range(line: int, total: int, rng: random.Random) -> list[int]:
    before, after = rng.randint(2, 6), rng.randint(8, 20)
    return [max(1, line - before), min(total, line + after)]


def build_session(number: int, origin: str, mod: str, text: str, rng: random.Random,
                  python: Python) -> Made | None:
    """One session spec over the module ``mod`` = ``text``; None when the drawn task does not
    apply to it."""
    tree = ast.parse(text)
    path = f"{mod}.py"
    test_path = f"tests/test_{mod}.py"
    tests = smoke_test(mod, tree, rng) if rng.random() < 0.4 else None
    kinds = list(TASK_WEIGHTS)
    order = rng.sample(kinds, len(kinds), counts=[TASK_WEIGHTS[k] for k in kinds])
    plan = None
    for kind in dict.fromkeys(order):
        plan = PLANNERS[kind](mod, text, tree, tests, rng)
        if plan is not None:
            break
    if plan is None:
        return None
    start = plan.planted[1] if plan.planted else text
    if plan.kind == "import-bug" and python.imports(mod, start):
        return None
    files = {path: start}
    if tests:
        files[test_path] = tests
    if rng.random() < 0.35:
        files["README.md"] = readme(mod, tree)
    if rng.random() < 0.3:
        files[".gitignore"] = "__pycache__/\n.pytest_cache/\n"
    total = start.count("\n")
    check_tests = tests is not None and rng.random() < 0.7
    check = Step("test", "bash", {"command": TEST_COMMAND},
                 "Which command runs the tests? Answer with the command only.") \
        if check_tests else Step("test", "bash", {"command": f'python -c "import {mod}"'},
                                 "Which command checks that the module imports? Answer with "
                                 "the command only.")
    opening = []
    if rng.random() < 0.45:
        opening.append(Step("view", "view", {"path": "."}, "Which folder or file do you look "
                            "at first? Answer with its path only."))
    if rng.random() < 0.65:
        opening.append(Step("view", "view", {"path": path},
                            f"Which file do you read {'next' if opening else 'first'}? Answer "
                            "with its path only."))
    else:
        opening.append(Step("view", "view", {"path": path, "view_range": _view_range(
            plan.line, total, rng)}, "Which lines of which file do you look at? Answer in one "
            "line."))
    if tests and plan.test_names and rng.random() < 0.5:
        opening.append(Step("view", "view", {"path": test_path},
                            "Which file do you read next? Answer with its path only."))
    steps = []
    if plan.kind == "import-bug":
        first = Step(check.kind, "bash", dict(check.arguments), check.ask, fails=True)
        steps = [first, *opening[-1:]]
    else:
        steps = opening
    kind = "fix" if plan.planted else "edit"
    for edit in plan.edits:
        ask = (f"Write the line of {edit.path} that causes the failure, then the same line "
               "fixed." if kind == "fix" else f"Write the lines of {edit.path} you change, "
               "then the same lines changed.")
        steps.append(Step(kind, "str_replace", {"path": edit.path, "old_str": edit.old,
                                                "new_str": edit.new}, ask))
    room = MAX_TURNS - 1 - len(steps)
    summary = plan.summary
    if tests is None and room >= 2 and rng.random() < 0.25:
        after = text if plan.planted else start
        for edit in plan.edits:
            after = after.replace(edit.old, edit.new, 1)
        steps.append(Step("create", "create", {"path": test_path,
                                               "file_text": smoke_test(mod, ast.parse(after),
                                                                       rng)},
                          f"Write the complete test file {test_path}. Answer with the code "
                          "only."))
        summary += f" Added {test_path}."
        check = Step("test", "bash", {"command": TEST_COMMAND},
                     "Which command runs the tests? Answer with the command only.")
        room -= 1
    if room >= 1 and (plan.planted or rng.random() < 0.65):
        steps.append(Step(check.kind, "bash", dict(check.arguments), check.ask, fails=False))
        summary += (" The tests pass." if check.arguments["command"] == TEST_COMMAND
                    else f" `import {mod}` works.")
    while len(steps) > MAX_TURNS - 1:  # drop views first, keeping the edits and checks
        views = [i for i, s in enumerate(steps) if s.kind == "view"]
        if not views:
            return None
        del steps[views[0]]
    if len(steps) < 2:
        steps.insert(0, Step("view", "view", {"path": path}, "Which file do you read first? "
                             "Answer with its path only."))
    steps.append(Step("final", "final_answer", {"text": summary},
                      "Summarise what you did in two sentences."))
    name = f"{PREFIX}{mod}-{number}"
    spec = SessionSpec(
        name=name, description=f"Synthetic session (train/agent_sessions.py): a {plan.kind} "
        f"task on a {total}-line module from {origin}.", task=plan.task, files=files,
        steps=steps)
    return Made(spec, origin, plan.kind)


def candidates(roots: Sequence[Path]) -> list[list[tuple[Path, str]]]:
    """Every usable source file under ``roots`` as (file, where it comes from), in groups by
    top-level module or package, so a package of a thousand generated modules is drawn as
    often as a one-file module."""
    groups: dict[tuple[int, str], list[tuple[Path, str]]] = {}
    for number, root in enumerate(roots):
        for path in source_files([Path(root)]):
            parts = path.relative_to(root).parts
            if "encodings" in parts[:-1]:
                continue  # a hundred codec modules of the same few lines
            key = (number, parts[0].removesuffix(".py"))
            groups.setdefault(key, []).append((path, f"{Path(root).name}/{'/'.join(parts)}"))
    return [groups[k] for k in sorted(groups)]


def build_sessions(roots: Sequence[Path], count: int, *, seed: int = 0,
                   max_lines: int = MAX_LINES, jobs: int = 2,
                   progress: Callable[[str], None] | None = None
                   ) -> tuple[list[dict[str, Any]], Counter[str]]:
    """``count`` sessions recorded with the real tools, and counts of what was made and
    skipped. Raises :class:`InputError` for ``count`` < 1 or roots without Python files.

    The specs are drawn one after another from the seeded generator; ``jobs`` of them are
    recorded at once (threads: the time is the tools' processes). The bash calls run the
    ``python`` of this process (its folder is put first on PATH while recording), the same
    that checked each module imports, so a module's third-party imports resolve alike.
    """
    if count < 1:
        raise InputError(f"--count must be at least 1 (got {count})")
    files = candidates(roots)
    if not files:
        raise InputError("no Python source files under " + ", ".join(map(str, roots)))
    rng = random.Random(seed)
    stats: Counter[str] = Counter()
    sessions: list[dict[str, Any]] = []
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), old_path])
    try:
        python = Python()
        tried, number = 0, 0
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            while len(sessions) < count:
                batch: list[Made] = []
                while len(batch) < max(1, jobs) * 4:
                    tried += 1
                    if tried > 50 * count + 1000:
                        raise InputError(f"only {len(sessions)} of {count} sessions could be "
                                         f"made from {sum(map(len, files))} source files")
                    made = _draw(files, rng, max_lines, python, number, stats)
                    if made is not None:
                        batch.append(made)
                        number += 1
                for made, played in zip(batch, pool.map(_play, batch), strict=True):
                    if isinstance(played, str):
                        stats["refused by play()"] += 1
                        if progress:
                            progress(f"refused {made.spec.name}: {played[:200]}")
                    elif len(sessions) < count:
                        sessions.append(played)
                        stats[f"task {made.kind}"] += 1
                if progress and len(sessions) < count:
                    progress(f"{len(sessions)}/{count} sessions")
    finally:
        os.environ["PATH"] = old_path
    return sessions, stats


def _draw(files: list[list[tuple[Path, str]]], rng: random.Random, max_lines: int, python: Python,
          number: int, stats: Counter[str]) -> Made | None:
    path, origin = rng.choice(rng.choice(files))
    try:
        source = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        stats["skipped: unreadable"] += 1
        return None
    text = module_text(source, rng, max_lines)
    mod = _module_name(path, rng) if text else None
    if text is None or mod is None:
        stats["skipped: no module"] += 1
        return None
    if not python.imports(mod, text):
        stats["skipped: does not import"] += 1
        return None
    made = build_session(number, origin, mod, text, rng, python)
    if made is None:
        stats["skipped: no task"] += 1
    return made


def _play(made: Made) -> dict[str, Any] | str:
    """The recorded session, or why ``play()`` refused it (an outcome not the spec's)."""
    try:
        return play(made.spec)
    except SystemExit as exc:
        return str(exc).splitlines()[0] if str(exc) else "refused"


def check_out(out: Path) -> Path:
    """``out`` when it can take the session files: a new folder or one without ``*.json``;
    else :class:`InputError`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} is not a folder")
    old = sorted(out.glob("*.json")) if out.is_dir() else []
    if old:
        raise InputError(f"{out} already holds {len(old)} session file(s): give an empty or "
                         "new folder")
    return out


def write_sessions(sessions: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """One ``<name>.json`` per session in ``out``, which must hold no session files yet."""
    out = check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for session in sessions:
        path = out / f"{session['name']}.json"
        path.write_text(json.dumps(session, indent=1, ensure_ascii=False) + "\n", "utf-8")
        paths.append(path)
    return paths
