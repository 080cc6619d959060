"""Find and run a project's tests; the last line is TESTS PASSED or TESTS FAILED.

Usage: python3 run_tests.py [PROJECT_FOLDER]   (default: the current folder)
Exit code: 0 passed, 1 failed, 2 no test command found.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def test_command(root: Path) -> list[str] | None:
    """The command that runs the tests of the project in ``root``, or None."""
    if (root / "package.json").is_file():
        scripts = json.loads((root / "package.json").read_text("utf-8")).get("scripts", {})
        if "test" in scripts and shutil.which("npm"):
            return ["npm", "test", "--silent"]
    if (root / "go.mod").is_file() and shutil.which("go"):
        return ["go", "test", "./..."]
    if (root / "Cargo.toml").is_file() and shutil.which("cargo"):
        return ["cargo", "test", "--quiet"]
    python_tests = [p for p in root.rglob("*.py")
                    if (p.name.startswith("test_") or p.name.endswith("_test.py"))
                    and not any(part.startswith(".") or part in {"node_modules", "venv"}
                                for part in p.relative_to(root).parts)]
    if python_tests or (root / "pyproject.toml").is_file():
        return [sys.executable, "-m", "pytest", "-q"]
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else ".").resolve()
    command = test_command(root)
    if command is None:
        print(f"no tests found in {root}: add tests (for Python: tests/test_*.py with pytest)")
        print("TESTS FAILED")
        return 2
    print("$ " + " ".join(command), flush=True)
    # Python reuses a compiled module whose source has the same size and modification second:
    # a file edited within a second of the last run (`+` to `-`) was tested as it was before.
    # A fresh, empty cache folder for each run makes every module compile from its source.
    with tempfile.TemporaryDirectory(prefix="run-tests-pycache-") as cache:
        env = {**os.environ, "PYTHONPYCACHEPREFIX": cache, "PYTHONDONTWRITEBYTECODE": "1"}
        code = subprocess.run(command, cwd=root, stdin=subprocess.DEVNULL, env=env).returncode
    print("TESTS PASSED" if code == 0 else f"TESTS FAILED (exit code {code})")
    return 0 if code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
