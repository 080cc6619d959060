"""The wheel a user installs with `pip install .` ships every module and data file."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "backend", "tools", "skills")
DATA = ("*.toml", "*.json", "SKILL.md", "*.md", "*.patch")


def test_the_wheel_holds_every_module_and_data_file(tmp_path: Path):
    # From a clean copy: a stale build/ folder in the checkout would hide a missing package.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", ".stage*", "node_modules",
        ".dflash-agent"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                           "--disable-pip-version-check", "-q", "-w", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("dflash_agent-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    expected = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*"):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            module = path.suffix == ".py" and (path.parent / "__init__.py").is_file()
            data = any(path.match(pattern) for pattern in DATA) and path.name != "README.md"
            if module or data:
                expected.add(path.relative_to(ROOT).as_posix())
    expected |= {p.relative_to(ROOT).as_posix()
                 for p in (ROOT / "skills" / "bundled").rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts}
    assert expected - shipped == set()
    assert "tools/mcp/manager.py" in shipped
    assert "backend/engine/facts/beellama-v0.3.2.json" in shipped
    # The engine build applies it: a wheel without it could not build the engine.
    assert "backend/engine/patches/b11434-per-request-draft-cap.patch" in shipped
    assert "backend/models/presets.toml" in shipped
