"""Write a minimal Python project (pyproject.toml, src/ layout, pytest test) into a folder.

Usage: python3 scaffold.py NAME [--dir FOLDER]
NAME is the import name (lowercase letters, digits, underscores). Existing files are never
overwritten: the script stops with exit code 1 and names them.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PYPROJECT = """[build-system]
requires = ["setuptools>=69"]
build-backend = "setuptools.build_meta"

[project]
name = "{dist}"
version = "0.1.0"
description = "{name}"
requires-python = ">=3.10"
dependencies = []

[project.optional-dependencies]
test = ["pytest>=8"]

[tool.setuptools.packages.find]
where = ["src"]

[tool.pytest.ini_options]
testpaths = ["tests"]
pythonpath = ["src"]
"""

CORE = '''"""The project's code: replace this example."""


def add(a: int, b: int) -> int:
    """Return a + b."""
    return a + b
'''

TEST = '''from {name}.core import add


def test_add_adds_two_numbers():
    assert add(2, 3) == 5


def test_add_handles_negative_numbers():
    assert add(-2, 1) == -1
'''


def files_for(name: str) -> dict[str, str]:
    """Relative path -> contents of the new project."""
    return {
        "pyproject.toml": PYPROJECT.format(name=name, dist=name.replace("_", "-")),
        f"src/{name}/__init__.py": f'"""{name}."""\n',
        f"src/{name}/core.py": CORE,
        "tests/test_core.py": TEST.format(name=name),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Create a Python project skeleton.")
    parser.add_argument("name", help="import name, e.g. todo_app")
    parser.add_argument("--dir", default=".", help="project folder (default: current)")
    args = parser.parse_args(argv)
    name = args.name.replace("-", "_")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        print(f"error: '{args.name}' is not a valid name: use lowercase letters, digits, _",
              file=sys.stderr)
        return 1
    root = Path(args.dir)
    files = files_for(name)
    existing = [p for p in files if (root / p).exists()]
    if existing:
        print("error: these files exist already, nothing written: " + ", ".join(existing),
              file=sys.stderr)
        return 1
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path}")
    print("next: python3 -m pytest -q")
    return 0


if __name__ == "__main__":
    sys.exit(main())
