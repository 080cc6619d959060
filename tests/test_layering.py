"""The package layering stated in agent/README.md, checked on every import in the source.

``agent`` is layered top to bottom: ``cli/`` → ``mcp_server/`` → ``newproject.py`` →
``sessions/`` → ``loop.py`` → the core (every other module at the top of ``agent/``). A module may
import its own layer and the layers below it, never one above. ``tools``, ``skills`` and
``backend`` never import ``agent``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Entry points sit above everything: they only start the command line or forward to a worker.
ENTRY = {"agent", "agent.__main__", "agent.entry", "agent.mcp_worker"}
LAYERS = ["agent.cli", "agent.mcp_server", "agent.newproject", "agent.sessions", "agent.loop"]


def module_name(path: Path, root: Path = ROOT) -> str:
    """``agent/cli/main.py`` → ``agent.cli.main``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path) -> set[str]:
    """Absolute module names imported by the file (``from a import b`` counts as ``a.b`` too,
    since ``b`` may be a submodule)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            found.add(node.module or "")
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def layer(module: str) -> int | None:
    """Index in LAYERS (0 = top), len(LAYERS) for the core, None for entry points."""
    if module in ENTRY:
        return None
    for index, prefix in enumerate(LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return index
    return len(LAYERS)


def is_module(name: str, root: Path) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def upward_imports(root: Path) -> list[str]:
    """Every import that runs up: into ``agent`` from the parts below it, or within ``agent``
    from a layer into one above it."""
    found = []
    for package in ("tools", "skills", "backend"):
        for path in sorted((root / package).rglob("*.py")):
            found += [f"{module_name(path, root)} imports {name}" for name in imports(path)
                      if name == "agent" or name.startswith("agent.")]
    for path in sorted((root / "agent").rglob("*.py")):
        here = layer(module_name(path, root))
        if here is None:
            continue
        for name in imports(path):
            if name.startswith("agent.") and is_module(name, root):
                there = layer(name)
                if there is None or there < here:
                    found.append(f"{module_name(path, root)} imports {name}")
    return found


def test_no_import_runs_up() -> None:
    assert upward_imports(ROOT) == []


def test_every_layer_exists_so_the_check_is_not_vacuous() -> None:
    names = {module_name(p) for p in (ROOT / "agent").rglob("*.py")}
    for prefix in LAYERS:
        assert any(n == prefix or n.startswith(prefix + ".") for n in names), prefix


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    for rel, text in {
        "agent/__init__.py": "",
        "agent/cli/__init__.py": "",
        "agent/cli/main.py": "import agent.context\n",
        "agent/sessions/__init__.py": "",
        "agent/sessions/repo.py": "from agent.cli.main import app\nfrom agent import context\n",
        "agent/context.py": "from agent.loop import Agent\n",
        "agent/loop.py": "",
        "tools/__init__.py": "",
        "tools/bash.py": "from agent.context import Budget\n",
        "backend/__init__.py": "",
        "skills/__init__.py": "",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert sorted(upward_imports(tmp_path)) == [
        "agent.context imports agent.loop",
        "agent.sessions.repo imports agent.cli.main",
        "tools.bash imports agent.context",
        "tools.bash imports agent.context.Budget",
    ]
