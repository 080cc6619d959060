"""The package layering stated in agent/README.md, checked on every import in the source.

``agent`` is layered top to bottom: ``cli/`` → ``mcp_server/`` → ``newproject/`` →
``sessions/`` → ``loop.py`` → the core (every other module at the top of ``agent/``). A module may
import its own layer and the layers below it, never one above. ``tools``, ``skills`` and
``backend`` never import ``agent``.

``train`` (the draft trainer) is a leaf beside the product: nothing imports it, and it imports
only ``backend``, except ``train.agent_requests``, which renders the agent's own requests
through ``benchmarks/agent_turns.py`` and so imports ``agent`` and ``tools`` too.
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


TRAIN_RENDERER = "train.agent_requests"
PRODUCT = ("agent", "tools", "skills", "backend")


def train_imports(root: Path) -> list[str]:
    """Imports of ``train`` from anywhere else, and imports from ``train`` of the product's
    packages other than ``backend`` (its renderer module excepted)."""
    found = []
    for package in (*PRODUCT, "benchmarks"):
        for path in sorted((root / package).rglob("*.py")):
            found += [f"{module_name(path, root)} imports {name}" for name in imports(path)
                      if name == "train" or name.startswith("train.")]
    for path in sorted((root / "train").rglob("*.py")):
        here = module_name(path, root)
        if here == TRAIN_RENDERER:
            continue
        found += [f"{here} imports {name}" for name in imports(path)
                  if name.split(".")[0] in ("agent", "tools", "skills", "benchmarks")]
    return found


def test_train_is_a_leaf_that_imports_only_backend() -> None:
    assert (ROOT / "train" / "__init__.py").is_file()
    assert train_imports(ROOT) == []


def test_an_import_of_train_is_found(tmp_path: Path) -> None:
    for rel, text in {"backend/x.py": "import train.cli\n",
                      "train/fit.py": "from agent.loop import Agent\nimport backend.x\n",
                      "train/agent_requests.py": "import agent.client\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert sorted(train_imports(tmp_path)) == ["backend.x imports train.cli",
                                               "train.fit imports agent.loop",
                                               "train.fit imports agent.loop.Agent"]


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
