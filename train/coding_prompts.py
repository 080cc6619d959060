"""Coding prompts built from Python source on this machine, in the shared
``train-prompts.jsonl`` format (``{"src", "text"}`` a line), for more data than the shared
file's 1,664 prompts.

From each module of the source trees (the standard library by default), parsed with
:mod:`ast`:

- ``func`` — "write a function that …" from a public function's signature and the first
  paragraph of its docstring (three phrasings);
- ``edit`` — a run of whole top-level definitions (25–110 lines) handed back with one
  identifier renamed (the agent's and the bench's copy-with-a-change case; three phrasings);
- ``complete`` — the signature and docstring to complete, HumanEval-style;
- ``tests`` — pytest tests for a given function's source.

Plus ``module`` prompts shaped like the bench's seed set on other topics. Prompts that are, or
are built from, the bench's own are dropped later by :func:`train.requests.is_bench_prompt`.
Everything is seeded: the same sources and seed give the same prompts.
"""

from __future__ import annotations

import ast
import keyword
import random
import re
import sysconfig
from collections.abc import Iterator, Sequence
from pathlib import Path

EDIT_ASKS = (
    "Here is a Python file:\n```python\n{code}```\nRepeat the file exactly, but rename `{old}` "
    "to `{new}`. Reply with the code only.",
    "Here is some Python code:\n```python\n{code}```\nRewrite it with `{old}` renamed to "
    "`{new}`. Output only the code.",
    "```python\n{code}```\nRename `{old}` to `{new}` everywhere in this file and return the "
    "whole file.",
)
FUNC_ASKS = (
    "Write a Python function `{name}({args})` that does the following: {doc} Return only the "
    "code.",
    "Implement `{name}({args})` in Python. {doc} Include a docstring and two example calls.",
    "Write a small Python module `{module}_utils.py` with a function `{name}({args})`. {doc} "
    "Add 3 tests.",
)
COMPLETE_ASK = ("Complete the following Python function. Return only the code.\n```python\n"
                "{code}```")
TESTS_ASK = ("Write pytest tests for this function. Return only the test code.\n```python\n"
             "{code}```")
TOPICS = ("inventory", "library catalog", "event calendar", "recipe book", "bank account",
          "contact book", "shopping cart", "expense tracker", "student grades", "movie ratings",
          "parking lot", "hotel booking", "weather log", "music playlist", "flight schedule",
          "warehouse", "job queue", "url shortener", "rate limiter", "LRU cache",
          "priority queue", "binary search tree", "graph", "matrix", "polynomial", "fraction",
          "ring buffer", "trie", "config parser", "CSV report", "log analyzer",
          "password validator", "unit converter", "voting system", "chess board",
          "tic-tac-toe game", "text statistics", "markdown table", "dependency resolver",
          "state machine", "interval set", "sparse vector", "time sheet", "course schedule")
VERBS = ("add", "remove", "update", "find", "search", "filter_by_status", "sort_by_date",
         "export_to_json", "load_from_json", "to_dict", "from_dict", "count", "clear",
         "summary", "validate", "merge", "get_all", "exists", "top_n", "reverse", "group_by",
         "average", "total", "history")
NEW_NAMES = ("entry", "value", "node", "record", "obj", "elem", "data", "target")
_IDENT = re.compile(r"\b([a-z_][a-z0-9_]{2,})\b")
_SKIP_NAMES = set(keyword.kwlist) | set(dir(__builtins__)) | {"self", "cls"}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def source_files(roots: Sequence[Path]) -> list[Path]:
    """Python files under ``roots``, tests and private modules left out, sorted."""
    files = []
    for root in roots:
        for path in sorted(Path(root).rglob("*.py")):
            parts = path.relative_to(root).parts
            if any(p.startswith(("test", "_")) and p != "__init__.py" for p in parts):
                continue
            if any(p in {"idlelib", "site-packages", "lib2to3", "tkinter"} for p in parts):
                continue
            files.append(path)
    return files


def _parse(path: Path) -> tuple[str, ast.Module] | None:
    try:
        source = path.read_text("utf-8")
        return source, ast.parse(source)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


def _first_paragraph(node: ast.AST) -> str | None:
    doc = ast.get_docstring(node)  # type: ignore[arg-type]
    if not doc:
        return None
    first = " ".join(doc.strip().split("\n\n")[0].split())
    return first if 20 < len(first) < 300 else None


def _module_prompts(path: Path, rng: random.Random) -> Iterator[dict[str, str]]:
    parsed = _parse(path)
    if parsed is None:
        return
    source, tree = parsed
    lines = source.splitlines(keepends=True)
    module = path.parent.name if path.stem == "__init__" else path.stem
    tops = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    for node in tops:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        doc = _first_paragraph(node)
        code = "".join(lines[node.lineno - 1:node.end_lineno])
        if doc:
            args = ", ".join(a.arg for a in node.args.args)
            yield {"src": "func", "text": rng.choice(FUNC_ASKS).format(
                name=node.name, args=args, doc=doc, module=module)}
            body = node.body[0]
            head = "".join(lines[node.lineno - 1:body.end_lineno])
            if len(node.body) > 1:
                yield {"src": "complete", "text": COMPLETE_ASK.format(code=head)}
        if 6 <= code.count("\n") <= 60:
            yield {"src": "tests", "text": TESTS_ASK.format(code=code)}
    for i in range(len(tops)):
        start = tops[i].lineno - 1
        for j in range(i, len(tops)):
            end = tops[j].end_lineno or start
            if end - start > 110:
                break
            if end - start >= 25 and rng.random() < 0.15:
                chunk = "".join(lines[start:end])
                names = [w for w in _IDENT.findall(chunk) if w not in _SKIP_NAMES]
                if names:
                    old = rng.choice(names)
                    new = rng.choice([*NEW_NAMES, old + "_new", "item_" + old[:4]])
                    yield {"src": "edit", "text": rng.choice(EDIT_ASKS).format(
                        code=chunk, old=old, new=new)}


def _seed_like(rng: random.Random) -> dict[str, str]:
    topic = rng.choice(TOPICS)
    cls = "".join(w.capitalize() for w in re.split(r"[^a-zA-Z]+", topic) if w)
    verbs = rng.sample(VERBS, rng.randint(5, 9))
    text = (f"Write a complete Python {topic} module. Include a {cls} class"
            + (f", a {cls}Item dataclass" if rng.random() < 0.5 else "")
            + (f", {cls}Status enum" if rng.random() < 0.4 else "")
            + f", {', '.join(verbs)}, and {rng.choice([3, 4, 5, 6])} tests. Return only one "
            "complete Python file.")
    return {"src": "module", "text": text}


def build_prompts(roots: Sequence[Path], *, seed: int = 0, modules: int = 1000,
                  limit: int | None = None) -> list[dict[str, str]]:
    """Prompts from ``roots`` plus ``modules`` seed-like module prompts, shuffled, duplicates
    removed, at most ``limit``."""
    rng = random.Random(seed)
    found = [p for path in source_files(roots) for p in _module_prompts(path, rng)]
    found += [_seed_like(rng) for _ in range(modules)]
    unique = list({p["text"]: p for p in found}.values())
    rng.shuffle(unique)
    return unique[:limit] if limit else unique
