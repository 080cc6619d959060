"""The repository's benchmark scripts (``benchmarks/*.py``: scripts, not a package) loaded as
modules, once per process, for the ``train`` stages that reuse their code."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(name: str, path: Path) -> ModuleType:
    """The script at ``path`` as module ``name`` (kept in ``sys.modules``: loaded once)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
