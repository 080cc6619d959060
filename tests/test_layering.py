"""The package layering stated in agent/README.md, checked on every import in the source.

``agent`` is layered top to bottom: ``cli/`` → ``mcp_server/`` → ``newproject/`` →
``sessions/`` → ``loop.py`` → the core (every other module at the top of ``agent/``). A module may
import its own layer and the layers below it, never one above. ``tools``, ``skills`` and
``backend`` never import ``agent``.

Beside the product, ``train`` → ``benchmarks`` → the product (``agent``, ``tools``, ``skills``,
``backend``), never back up: nothing of the product imports ``benchmarks`` or ``train``, and
``benchmarks`` never imports ``train``. ``train`` (the draft trainer) is a leaf: nothing imports
it, and it imports only ``backend`` and ``benchmarks``, except ``train.agent_requests``, which
renders the agent's own requests through :mod:`benchmarks.agent_turns` and so imports ``agent``
and ``tools`` too.

``backend`` (backend/README.md) has wings, top to bottom: ``doctor`` → ``measure/`` → ``serve/`` →
``cache`` → ``models/`` → ``engine/`` → the base (``home``, ``machine``, ``secret_store``,
``errors`` and the package face); no other file sits at the top of ``backend/``. The
tool-call protocols (agent/protocols/README.md) are part of ``agent``'s core, ordered among
themselves: ``calls`` → ``text``, ``choice`` and ``whole`` → ``base``. No import anywhere in
the product closes a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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


BESIDE = {package: ("benchmarks", "train") for package in PRODUCT} | {"benchmarks": ("train",)}
"""Package → the packages beside the product that it must not import (train → benchmarks →
the product)."""


def train_imports(root: Path) -> list[str]:
    """Imports of ``train`` from anywhere else, and imports from ``train`` of the product's
    packages other than ``backend`` (its renderer module excepted; ``benchmarks`` is below
    ``train``, so importing it is allowed)."""
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
                  if name.split(".")[0] in ("agent", "tools", "skills")]
    return found


def imports_back_up(root: Path) -> list[str]:
    """Every import that runs up the chain train → benchmarks → the product: the product
    importing ``benchmarks`` or ``train``, ``benchmarks`` importing ``train``."""
    found = []
    for package, above in BESIDE.items():
        for path in sorted((root / package).rglob("*.py")):
            found += [f"{module_name(path, root)} imports {name}" for name in imports(path)
                      if name.split(".")[0] in above]
    return found


def test_train_is_a_leaf_that_imports_only_backend_and_benchmarks() -> None:
    assert (ROOT / "train" / "__init__.py").is_file()
    assert train_imports(ROOT) == []


def test_train_benchmarks_and_the_product_import_only_downward() -> None:
    assert (ROOT / "benchmarks" / "__init__.py").is_file()
    assert imports_back_up(ROOT) == []


def test_the_trainer_really_imports_the_benchmarks_so_the_check_is_not_vacuous() -> None:
    used = {name for path in (ROOT / "train").rglob("*.py") for name in imports(path)}
    assert any(name.startswith("benchmarks.") for name in used)


def test_an_import_of_train_is_found(tmp_path: Path) -> None:
    for rel, text in {"backend/x.py": "import train.cli\n",
                      "train/fit.py": "from agent.loop import Agent\nimport backend.x\n",
                      "train/sessions.py": "from benchmarks.agent_turns import ReplayAgent\n",
                      "train/agent_requests.py": "import agent.client\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert sorted(train_imports(tmp_path)) == ["backend.x imports train.cli",
                                               "train.fit imports agent.loop",
                                               "train.fit imports agent.loop.Agent"]


def test_an_import_back_up_the_chain_is_found(tmp_path: Path) -> None:
    for rel, text in {
        "agent/loop.py": "from benchmarks.agent_turns import ReplayAgent\n",
        "tools/bash.py": "import benchmarks\n",
        "skills/load.py": "import train.cli\n",
        "backend/serve/server.py": "import backend.home\n",
        "benchmarks/agent_turns.py": "from agent.loop import Agent\nimport train.requests\n",
        "benchmarks/forced.py": "import backend.serve.server\n",
        "train/agent_sessions.py": "from benchmarks.agent_turns import ReplayAgent\n",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert sorted(imports_back_up(tmp_path)) == [
        "agent.loop imports benchmarks.agent_turns",
        "agent.loop imports benchmarks.agent_turns.ReplayAgent",
        "benchmarks.agent_turns imports train.requests",
        "skills.load imports train.cli",
        "tools.bash imports benchmarks",
    ]


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


# backend's wings and agent's protocols, top to bottom; a module imports its own wing and those
# below it. A name matches itself and what lies under it; the longest match wins, so the face
# ``backend`` (the package's __init__, which imports nothing) is only the face itself.
BACKEND_WINGS: list[tuple[str, ...]] = [
    ("backend.doctor",),
    ("backend.measure",),
    ("backend.serve",),
    ("backend.cache",),
    ("backend.models",),
    ("backend.engine",),
    ("backend.home", "backend.machine", "backend.secret_store", "backend.errors", "backend"),
]
BACKEND_TOP = {"__init__.py", "home.py", "machine.py", "cache.py", "doctor.py", "secret_store.py",
               "errors.py"}
PROTOCOLS: list[tuple[str, ...]] = [
    ("agent.protocols.calls",),
    ("agent.protocols.text", "agent.protocols.choice", "agent.protocols.whole"),
    ("agent.protocols.base", "agent.protocols"),
]


def wing(module: str, wings: list[tuple[str, ...]]) -> int | None:
    """Index of the wing ``module`` lies in (0 = top), None where none names it."""
    matches = [(len(name), index) for index, names in enumerate(wings) for name in names
               if module == name or (module.startswith(name + ".") and "." in name)]
    return max(matches)[1] if matches else None


def wing_violations(root: Path, folder: str, wings: list[tuple[str, ...]]) -> list[str]:
    """Imports within ``folder`` that run up its wings, and modules no wing names."""
    prefix = ".".join(Path(folder).parts)
    found = []
    for path in sorted((root / folder).rglob("*.py")):
        here_name = module_name(path, root)
        here = wing(here_name, wings)
        if here is None:
            found.append(f"{here_name} is in no wing")
            continue
        for name in sorted(imports(path)):
            if not (name == prefix or name.startswith(prefix + ".")) or not is_module(name, root):
                continue
            there = wing(name, wings)
            if there is None or there < here:
                found.append(f"{here_name} imports {name}")
    return found


def test_backend_wings_import_only_downward() -> None:
    assert wing_violations(ROOT, "backend", BACKEND_WINGS) == []


def test_only_the_base_the_cache_and_the_doctor_sit_at_the_top_of_backend() -> None:
    assert {p.name for p in (ROOT / "backend").glob("*.py")} == BACKEND_TOP


MAX_LINES = 500
"""The house rule (backend/README.md, issue 51): no module of the product over this many
lines."""


@pytest.mark.parametrize("package", ["agent", "backend", "tools", "skills"])
def test_no_module_is_over_the_house_rule(package: str) -> None:
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / package).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_protocols_import_only_downward_and_none_is_left_at_the_top_of_agent() -> None:
    assert wing_violations(ROOT, "agent/protocols", PROTOCOLS) == []
    assert not [p.name for p in (ROOT / "agent").glob("*.py") if "protocol" in p.name]


def test_every_wing_exists_so_the_check_is_not_vacuous() -> None:
    for wings in (BACKEND_WINGS, PROTOCOLS):
        for names in wings:
            for name in names:
                assert is_module(name, ROOT), name


def test_an_import_up_the_wings_is_found(tmp_path: Path) -> None:
    for rel, text in {
        "backend/__init__.py": "",
        "backend/home.py": "",
        "backend/engine/__init__.py": "",
        "backend/engine/build.py": "from backend import secret_store\nimport backend.home\n",
        "backend/secret_store.py": "",
        "backend/models/__init__.py": "",
        "backend/models/sources.py": "from backend.serve.server import up\n",
        "backend/serve/__init__.py": "",
        "backend/serve/server.py": "from backend.engine import build\nimport backend.cache\n",
        "backend/cache.py": "from backend.doctor import run\n",
        "backend/doctor.py": "from backend.measure.bench import run\n",
        "backend/stray.py": "",
    }.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert wing_violations(tmp_path, "backend", BACKEND_WINGS) == [
        "backend.cache imports backend.doctor",
        "backend.models.sources imports backend.serve.server",
        "backend.stray is in no wing",
    ]


SOURCES = (*PRODUCT, "benchmarks", "train")
"""The product and what sits beside it: where a circle is looked for."""


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module → the modules of :data:`SOURCES` it imports (any import, a function's too)."""
    graph = {}
    for package in SOURCES:
        for path in (root / package).rglob("*.py"):
            graph[module_name(path, root)] = {
                name for name in imports(path)
                if name.split(".")[0] in SOURCES and is_module(name, root)}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                other = stack.pop()
                group.append(other)
                if other == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_closes_a_circle() -> None:
    assert circles(import_graph(ROOT)) == []


def test_a_circle_is_found() -> None:
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}}
    assert circles(graph) == [["a.x", "a.y", "a.z"]]


def missing_imports(root: Path) -> list[str]:
    """Imports of the product's modules (a function's lazy ones too) that name no module:
    ``import a.b`` needs ``a.b``; ``from a.b import c`` needs ``a.b`` (``c`` may be a name)."""
    found = []
    for folder in (*PRODUCT, "train", "benchmarks", "tests"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    names = [node.module or ""]
                else:
                    continue
                found += [f"{path.relative_to(root)}: {name}" for name in names
                          if name.split(".")[0] in (*PRODUCT, "train")
                          and not is_module(name, root)]
    return found


def test_every_import_of_the_product_names_a_module_that_exists() -> None:
    # Lazy imports inside functions run only when their path does; this finds a stale one now.
    assert missing_imports(ROOT) == []


def test_a_stale_import_is_found(tmp_path: Path) -> None:
    (tmp_path / "backend" / "serve").mkdir(parents=True)
    (tmp_path / "backend" / "__init__.py").write_text("")
    (tmp_path / "backend" / "serve" / "__init__.py").write_text("")
    (tmp_path / "backend" / "serve" / "server.py").write_text("")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "x.py").write_text(
        "def f():\n    from backend.server import up\n    from backend.serve.server import up\n")
    assert missing_imports(tmp_path) == ["tests/x.py: backend.server"]
